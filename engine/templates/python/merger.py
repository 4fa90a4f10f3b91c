"""__NAME__: a config merger for vigil.

Each layer applies over the ones before it as a JSON merge patch (RFC 7386:
objects merge key by key, null deletes, anything else replaces). A merger
decides merge rules only; vigil checks every layer and the result against
its config schema. It serves under the name `default-merger`.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.exports.merger import Rejection


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return patch
    merged = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


class Merger(wit_world.exports.Merger):
    def merge(self, layers):
        merged, rejections = {}, []
        for layer in layers:
            try:
                value = json.loads(layer.json)
            except ValueError:
                value = None
            if not isinstance(value, dict):
                rejections.append(Rejection(layer.source, "$", "layer must be a JSON object"))
                continue
            merged = merge_patch(merged, value)
        if rejections:
            raise Err(rejections)
        return json.dumps(merged)
