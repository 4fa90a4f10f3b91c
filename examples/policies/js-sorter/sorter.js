// vigil's default candidate sorter, in JavaScript.
//
// Refuses static, mirror and system-critical pods and pods carrying a skip
// label or annotation named in the config; orders the rest best-effort first,
// then burstable, then guaranteed, and within a class by the kubelet's memory
// ranking (pods above their request first, then lower priority, then the
// larger excess), then by namespace, name and UID.
//
// Config (JSON): {"skipLabels": ["key", ...], "skipAnnotations": ["key", ...]}
// Its interest is exactly those keys: the host passes no other label or
// annotation.
//
// Records arrive as objects with camelCase fields, enums as strings, u64 as
// BigInt; throwing a string answers `err(string)`.

const QOS_RANK = { 'best-effort': 0, burstable: 1, guaranteed: 2 };
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

const cmp = (a, b) => (a > b) - (a < b);

// Strings compare by code point (as UTF-8 bytes do), not by UTF-16 unit.
function cmpText(a, b) {
  const x = Array.from(a, (c) => c.codePointAt(0));
  const y = Array.from(b, (c) => c.codePointAt(0));
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    if (x[i] !== y[i]) return cmp(x[i], y[i]);
  }
  return cmp(x.length, y.length);
}

function evictionOrder(a, b) {
  const exceeds = (p) => p.usage.memoryWorkingSetBytes > p.requests.memoryBytes;
  const excess = (p) => p.usage.memoryWorkingSetBytes - p.requests.memoryBytes;
  return (
    cmp(QOS_RANK[a.qos], QOS_RANK[b.qos]) ||
    cmp(exceeds(b), exceeds(a)) ||
    cmp(a.priority, b.priority) ||
    cmp(excess(b), excess(a)) ||
    cmpText(a.namespace, b.namespace) ||
    cmpText(a.name, b.name) ||
    cmpText(a.uid, b.uid)
  );
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
    order.sort((i, j) => evictionOrder(candidates[i].pod, candidates[j].pod));
    return { order, rejected };
  },
};
