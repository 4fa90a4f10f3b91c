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

// A bug's exception traps the call — a fault, which rolls a new version back
// — but reaches vigil only as "expected a string". This writes its message and
// stack to stderr first, and the fault report carries them. A thrown list of
// rejections stays an answer: the export's err.
const reported = (exports) => Object.fromEntries(Object.entries(exports).map(([name, f]) => [name, (...args) => {
  try {
    return f(...args);
  } catch (e) {
    if (!Array.isArray(e)) console.error(`${name}: ${e}\n${e?.stack ?? ''}`);
    throw e;
  }
}]));

export const merger = reported({
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
});
