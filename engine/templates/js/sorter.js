// __NAME__: a candidate sorter for vigil.
//
// Refuses static, mirror and system-critical pods; orders the rest by memory
// used, most first, then by UID. vigil evicts in this order: under a threshold
// it gives the strategy's ranking and evicts the first pod of yours. Make it
// yours: change `evictFirst`, read your settings from `config` (JSON,
// `policies.__NAME__.config`) and `throw 'why'` (a string) when they are
// wrong; declare the labels and annotations you read.
//
// Records are objects with camelCase fields, enums are strings, u64 and s64
// are BigInt, an absent option is `undefined`.

function refusal(pod) {
  if (pod.isStatic) return 'static pod';
  if (pod.isMirror) return 'mirror pod';
  if (pod.isCritical) return 'system-critical pod';
  return undefined;
}

// The eviction order: the pod with the larger key goes first, ties by UID.
// Here the pod using the most memory; newest first would be
// `(pod) => pod.startTimeMs`.
// A usage the host could not read is absent (`undefined`): 0 here.
const evictFirst = (pod) => pod.usage.memoryWorkingSetBytes ?? 0n;

// A bug's exception traps the call — a fault, which rolls a new version back
// — but reaches vigil only as "expected a string". This writes its message and
// stack to stderr first, and the fault report carries them. `throw 'why'` (a
// string) stays an answer: the export's err("why").
const reported = (exports) => Object.fromEntries(Object.entries(exports).map(([name, f]) => [name, (...args) => {
  try {
    return f(...args);
  } catch (e) {
    if (typeof e !== 'string') console.error(`${name}: ${e}\n${e?.stack ?? ''}`);
    throw e;
  }
}]));

export const sorter = reported({
  declareInterest(config) {
    return { labels: [], annotations: [], facts: [] };
  },

  sort(strategies, candidates, config) {
    const order = [];
    const rejected = [];
    candidates.forEach((candidate, index) => {
      const reason = refusal(candidate.pod);
      if (reason === undefined) order.push(index);
      else rejected.push({ index, reason });
    });
    const key = (i) => evictFirst(candidates[i].pod);
    const uid = (i) => candidates[i].pod.uid;
    order.sort((a, b) =>
      key(a) !== key(b) ? (key(a) > key(b) ? -1 : 1)
        : uid(a) < uid(b) ? -1 : uid(a) > uid(b) ? 1 : 0);
    return { order, rejected };
  },
});
