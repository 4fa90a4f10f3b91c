// vigil's config merger, in JavaScript: the default merger, again.
//
// Decides how config layers combine, nothing else: each layer applies over the
// previous ones as a JSON merge patch (RFC 7386: objects merge key by key,
// null deletes, anything else — lists included — replaces). What a config may
// contain is vigil's schema, checked by the host on every layer before the
// merge and on the result after it.
//
// JavaScript has one number type: an integer beyond 2^53 in a policy's own
// config comes out rounded (vigil's own settings are all far below that).

import { log } from 'vigil:policy/log@0.3.0';

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

// Sets a key even if it is `__proto__`.
function put(object, key, value) {
  Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true });
}

function mergePatch(target, patch) {
  if (!isObject(patch)) return patch;
  const merged = isObject(target) ? target : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete merged[key];
    else put(merged, key, mergePatch(Object.hasOwn(merged, key) ? merged[key] : undefined, value));
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
      } catch (e) {
        rejections.push({ source: layer.source, field: '$', reason: `layer is not JSON: ${e.message}` });
        continue;
      }
      if (!isObject(value)) {
        rejections.push({ source: layer.source, field: '$', reason: 'layer must be a JSON object' });
        continue;
      }
      merged = mergePatch(merged, value);
    }
    if (rejections.length > 0) {
      log('warn', `${rejections.length} of ${layers.length} config layer(s) cannot be merged`);
      throw rejections;
    }
    return JSON.stringify(merged);
  },
};
