"""vigil's default candidate sorter, in Python.

Refuses static, mirror and system-critical pods and pods carrying a skip label
or annotation named in the config; orders the rest best-effort first, then
burstable, then guaranteed, and within a class by the kubelet's memory ranking
(pods above their request first, then lower priority, then the larger excess),
then by namespace, name and UID.

Config (JSON): {"skipLabels": ["key", ...], "skipAnnotations": ["key", ...]}
Its interest is exactly those keys: the host passes no other label or
annotation.
"""

import json
from functools import cmp_to_key

import wit_world
from componentize_py_types import Err
from wit_world.exports.sorter import Rejection, Sorted
from wit_world.imports.types import Interest, QosClass

QOS_RANK = {QosClass.BEST_EFFORT: 0, QosClass.BURSTABLE: 1, QosClass.GUARANTEED: 2}
FIELDS = {"skipLabels": "labels", "skipAnnotations": "annotations"}


def skip_keys(config):
    """The skip keys of the config, or raises Err naming what is wrong."""
    try:
        value = json.loads(config if config.strip() else "{}")
    except ValueError as e:
        raise Err(f"config is not JSON: {e}")
    if not isinstance(value, dict):
        raise Err("config must be a JSON object")
    keys = {"labels": [], "annotations": []}
    for field, items in value.items():
        if field not in FIELDS:
            raise Err(f"$.{field}: unknown field")
        if not isinstance(items, list):
            raise Err(f"$.{field}: must be a list of strings")
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise Err(f"$.{field}[{i}]: must be a string")
            keys[FIELDS[field]].append(item)
    return keys


def refusal(pod, keys):
    """Why the pod must not be evicted, or None."""
    if pod.is_static:
        return "static pod"
    if pod.is_mirror:
        return "mirror pod"
    if pod.is_critical:
        return "system-critical pod"
    for pair in pod.labels:
        if pair.key in keys["labels"]:
            return f"carries skip label {pair.key}"
    for pair in pod.annotations:
        if pair.key in keys["annotations"]:
            return f"carries skip annotation {pair.key}"
    return None


def cmp(a, b):
    return (a > b) - (a < b)


def eviction_order(a, b):
    """Negative when pod a is evicted before pod b."""
    def exceeds(p):
        return p.usage.memory_working_set_bytes > p.requests.memory_bytes

    def excess(p):
        return p.usage.memory_working_set_bytes - p.requests.memory_bytes

    return (
        cmp(QOS_RANK[a.qos], QOS_RANK[b.qos])
        or cmp(exceeds(b), exceeds(a))
        or cmp(a.priority, b.priority)
        or cmp(excess(b), excess(a))
        or cmp((a.namespace, a.name, a.uid), (b.namespace, b.name, b.uid))
    )


class Sorter(wit_world.exports.Sorter):
    def declare_interest(self, config):
        """The skip keys (none if the config is invalid: sort reports that)."""
        try:
            keys = skip_keys(config)
        except Err:
            return Interest([], [])
        return Interest(keys["labels"], keys["annotations"])

    def sort(self, strategies, candidates, config):
        keys = skip_keys(config)
        order, rejected = [], []
        for index, candidate in enumerate(candidates):
            reason = refusal(candidate.pod, keys)
            if reason is None:
                order.append(index)
            else:
                rejected.append(Rejection(index, reason))
        by_pod = cmp_to_key(eviction_order)
        order.sort(key=lambda i: by_pod(candidates[i].pod))
        return Sorted(order, rejected)
