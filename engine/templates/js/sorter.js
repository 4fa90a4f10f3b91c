// __NAME__: a candidate sorter for vigil.
//
// Refuses static, mirror and system-critical pods; orders the rest by memory
// used, most first, then by UID. Make it yours: read your settings from
// `config` (JSON, `policies.__NAME__.config`) and `throw 'why'` (a string) when
// they are wrong; declare the labels and annotations you read.
//
// Records are objects with camelCase fields, enums are strings, u64 and s64
// are BigInt, an absent option is `undefined`.

function refusal(pod) {
  if (pod.isStatic) return 'static pod';
  if (pod.isMirror) return 'mirror pod';
  if (pod.isCritical) return 'system-critical pod';
  return undefined;
}

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
    return { labels: [], annotations: [] };
  },

  sort(strategies, candidates, config) {
    const order = [];
    const rejected = [];
    candidates.forEach((candidate, index) => {
      const reason = refusal(candidate.pod);
      if (reason === undefined) order.push(index);
      else rejected.push({ index, reason });
    });
    const pod = (i) => candidates[i].pod;
    const used = (i) => pod(i).usage.memoryWorkingSetBytes;
    order.sort((a, b) =>
      used(a) !== used(b) ? (used(a) > used(b) ? -1 : 1)
        : pod(a).uid < pod(b).uid ? -1 : pod(a).uid > pod(b).uid ? 1 : 0);
    return { order, rejected };
  },
});
