"""vigil's default candidate sorter, in Python.

Refuses static, mirror and system-critical pods and pods carrying a skip label
or annotation named in the config; keeps the rest in the order given (the
strategies' ranking).

Config (JSON): {"skipLabels": ["key", ...], "skipAnnotations": ["key", ...]}
Its interest is exactly those keys: the host passes no other label or
annotation.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.exports.sorter import Rejection, Sorted
from wit_world.imports.types import Interest

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
        return Sorted(order, rejected)
