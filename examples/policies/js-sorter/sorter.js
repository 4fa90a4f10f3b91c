// vigil's default candidate sorter, in JavaScript.
//
// Refuses static, mirror and system-critical pods and pods carrying a skip
// label or annotation named in the config; keeps the rest in the order given
// (the strategies' ranking).
//
// Config (JSON): {"skipLabels": ["key", ...], "skipAnnotations": ["key", ...]};
// an entry "key=value" refuses only the pods whose key has that value. Its
// interest is exactly those keys (each once): the host passes no other label
// or annotation.
//
// Records arrive as objects with camelCase fields, enums as strings, u64 as
// BigInt; throwing a string answers `err(string)`.

const FIELDS = { skipLabels: 'labels', skipAnnotations: 'annotations' };

function skipKeys(config) {
  let value;
  try {
    value = JSON.parse(config.trim() === '' ? '{}' : config);
  } catch (e) {
    throw `config is not JSON: ${e.message}`;
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw 'config must be a JSON object';
  }
  const keys = { labels: [], annotations: [] };
  for (const [field, items] of Object.entries(value)) {
    if (!Object.hasOwn(FIELDS, field)) throw `$.${field}: unknown field`;
    if (!Array.isArray(items)) throw `$.${field}: must be a list of strings`;
    items.forEach((item, i) => {
      if (typeof item !== 'string') throw `$.${field}[${i}]: must be a string`;
      if (item === '' || item.startsWith('=')) {
        throw `$.${field}[${i}]: ${JSON.stringify(item)} names no key`;
      }
      const at = item.indexOf('=');
      const skip = at < 0 ? { key: item, value: null } : { key: item.slice(0, at), value: item.slice(at + 1) };
      keys[FIELDS[field]].push(skip);
    });
  }
  return keys;
}

const matches = (skip, kv) => kv.key === skip.key && (skip.value === null || kv.value === skip.value);

// How the first pair a skip entry matches is named, or null.
function skipped(pairs, skips) {
  const pair = pairs.find((kv) => skips.some((s) => matches(s, kv)));
  if (!pair) return null;
  const byValue = skips.some((s) => s.value !== null && matches(s, pair));
  return byValue ? `${pair.key}=${pair.value}` : pair.key;
}

// Each key once, in the config's order.
const names = (skips) => [...new Set(skips.map((s) => s.key))];


function refusal(pod, keys) {
  if (pod.isStatic) return 'static pod';
  if (pod.isMirror) return 'mirror pod';
  if (pod.isCritical) return 'system-critical pod';
  const label = skipped(pod.labels, keys.labels);
  if (label !== null) return `carries skip label ${label}`;
  const annotation = skipped(pod.annotations, keys.annotations);
  if (annotation !== null) return `carries skip annotation ${annotation}`;
  return null;
}

export const sorter = {
  // The labels and annotations read under `config`: the skip keys (none if
  // the config is invalid: `sort` reports that).
  declareInterest(config) {
    try {
      const keys = skipKeys(config);
      return { labels: names(keys.labels), annotations: names(keys.annotations), facts: [] };
    } catch {
      return { labels: [], annotations: [], facts: [] };
    }
  },

  sort(strategies, candidates, config) {
    const keys = skipKeys(config);
    const order = [];
    const rejected = [];
    candidates.forEach((candidate, index) => {
      const reason = refusal(candidate.pod, keys);
      if (reason === null) order.push(index);
      else rejected.push({ index, reason });
    });
    return { order, rejected };
  },
};
