// vigil's default candidate sorter, in JavaScript.
//
// Refuses static, mirror and system-critical pods and pods carrying a skip
// label or annotation named in the config; keeps the rest in the order given
// (the strategies' ranking).
//
// Config (JSON): {"skipLabels": ["key", ...], "skipAnnotations": ["key", ...]}
// Its interest is exactly those keys: the host passes no other label or
// annotation.
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
      keys[FIELDS[field]].push(item);
    });
  }
  return keys;
}

function refusal(pod, keys) {
  if (pod.isStatic) return 'static pod';
  if (pod.isMirror) return 'mirror pod';
  if (pod.isCritical) return 'system-critical pod';
  const label = pod.labels.find((kv) => keys.labels.includes(kv.key));
  if (label) return `carries skip label ${label.key}`;
  const annotation = pod.annotations.find((kv) => keys.annotations.includes(kv.key));
  if (annotation) return `carries skip annotation ${annotation.key}`;
  return null;
}

export const sorter = {
  // The labels and annotations read under `config`: the skip keys (none if
  // the config is invalid: `sort` reports that).
  declareInterest(config) {
    try {
      return skipKeys(config);
    } catch {
      return { labels: [], annotations: [] };
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
