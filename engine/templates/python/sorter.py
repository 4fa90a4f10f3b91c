"""__NAME__: a candidate sorter for vigil.

Refuses static, mirror and system-critical pods; orders the rest by memory
used, most first, then by UID. vigil evicts in this order: under a threshold it
gives the strategy's ranking and evicts the first pod of yours. Make it yours:
change `evict_first`, read your settings from `config` (JSON,
`policies.__NAME__.config`) and `raise Err("why")` when they are wrong; declare
the labels and annotations you read.
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


def evict_first(pod):
    """The eviction order: the pod with the larger key goes first, ties by UID.

    Here the pod using the most memory; newest first would be
    `pod.start_time_ms`.
    """
    # A usage the host could not read is absent (None): 0 here.
    return pod.usage.memory_working_set_bytes or 0


class Sorter(wit_world.exports.Sorter):
    def declare_interest(self, config):
        return Interest([], [], [])

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
            return (-evict_first(pod), pod.uid)

        order.sort(key=key)
        return Sorted(order, rejected)
