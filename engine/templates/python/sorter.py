"""__NAME__: a candidate sorter for vigil.

Refuses static, mirror and system-critical pods; orders the rest by memory
used, most first, then by UID. Make it yours: read your settings from `config`
(JSON, `policies.__NAME__.config`) and `raise Err("why")` when they are wrong;
declare the labels and annotations you read.
"""

import wit_world
from wit_world.exports.sorter import Rejection, Sorted
from wit_world.imports.types import Interest


def refusal(pod):
    """Why `pod` must not be evicted, if it must not."""
    if pod.is_static:
        return "static pod"
    if pod.is_mirror:
        return "mirror pod"
    if pod.is_critical:
        return "system-critical pod"
    return None


class Sorter(wit_world.exports.Sorter):
    def declare_interest(self, config):
        return Interest([], [])

    def sort(self, strategies, candidates, config):
        order, rejected = [], []
        for index, candidate in enumerate(candidates):
            reason = refusal(candidate.pod)
            if reason is None:
                order.append(index)
            else:
                rejected.append(Rejection(index, reason))

        def key(index):
            pod = candidates[index].pod
            return (-pod.usage.memory_working_set_bytes, pod.uid)

        order.sort(key=key)
        return Sorted(order, rejected)
