"""vigil's default candidate sorter, in Python.

Refuses static, mirror and system-critical pods and pods carrying a skip label
or annotation named in the config; keeps the rest in the order given (the
strategies' ranking).

Config (JSON): {"skipLabels": ["key", ...], "skipAnnotations": ["key", ...]};
an entry "key=value" refuses only the pods whose key has that value. Its
interest is exactly those keys (each once): the host passes no other label or
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
            if item == "" or item.startswith("="):
                raise Err(f"$.{field}[{i}]: {json.dumps(item)} names no key")
            key, _, value = item.partition("=")
            keys[FIELDS[field]].append((key, value if "=" in item else None))
    return keys


def matches(skip, pair):
    key, value = skip
    return pair.key == key and (value is None or pair.value == value)


def skipped(pairs, skips):
    """How the first pair a skip entry matches is named, or None."""
    for pair in pairs:
        if any(matches(s, pair) for s in skips):
            if any(s[1] is not None and matches(s, pair) for s in skips):
                return f"{pair.key}={pair.value}"
            return pair.key
    return None


def names(skips):
    """Each key once, in the config's order."""
    keys = []
    for key, _ in skips:
        if key not in keys:
            keys.append(key)
    return keys


def refusal(pod, keys):
    """Why the pod must not be evicted, or None."""
    if pod.is_static:
        return "static pod"
    if pod.is_mirror:
        return "mirror pod"
    if pod.is_critical:
        return "system-critical pod"
    label = skipped(pod.labels, keys["labels"])
    if label is not None:
        return f"carries skip label {label}"
    annotation = skipped(pod.annotations, keys["annotations"])
    if annotation is not None:
        return f"carries skip annotation {annotation}"
    return None


class Sorter(wit_world.exports.Sorter):
    def declare_interest(self, config):
        """The skip keys (none if the config is invalid: sort reports that)."""
        try:
            keys = skip_keys(config)
        except Err:
            return Interest([], [], [])
        return Interest(names(keys["labels"]), names(keys["annotations"]), [])

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
