// __NAME__: a config merger for vigil.
//
// Each layer applies over the ones before it as a JSON merge patch (RFC 7386:
// objects merge key by key, null deletes, anything else replaces). A merger
// decides merge rules only; vigil checks every layer and the result against
// its config schema. It serves under the name `default-merger`.

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

function mergePatch(target, patch) {
  if (!isObject(patch)) return patch;
  const merged = isObject(target) ? target : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete merged[key];
    else {
      const previous = Object.hasOwn(merged, key) ? merged[key] : undefined;
      Object.defineProperty(merged, key, {
        value: mergePatch(previous, value), enumerable: true, writable: true, configurable: true,
      });
    }
  }
  return merged;
}

export const merger = {
  merge(layers) {
    let merged = {};
    const rejections = [];
    for (const layer of layers) {
      let value;
      try {
        value = JSON.parse(layer.json);
      } catch {
        value = undefined;
      }
      if (!isObject(value)) {
        rejections.push({ source: layer.source, field: '$', reason: 'layer must be a JSON object' });
        continue;
      }
      merged = mergePatch(merged, value);
    }
    if (rejections.length > 0) throw rejections;
    return JSON.stringify(merged);
  },
};
