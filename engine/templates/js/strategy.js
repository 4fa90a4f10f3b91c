// __NAME__: an eviction strategy for vigil.
//
// The threshold is met (hard) while `memory.available` is below a tenth of the
// node's memory; the victims are the pods using the most memory. Make it yours:
// read your settings from `snapshot.config` (JSON, `policies.__NAME__.config`)
// and `throw 'why'` (a string) when they are wrong or a signal is missing.
//
// Records are objects with camelCase fields, enums are strings ('hard'), u64
// and s64 are BigInt (`0n`), an absent option is `undefined`.

const SIGNAL = 'memory.available';
const SCOPE = 'memory';

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

export const strategy = reported({
  declareInterest(config) {
    // No labels, annotations or pod facts read; evaluate judges the
    // kubelet's signals only (name others in `signals` to get them).
    return { keys: { labels: [], annotations: [], facts: [] }, podsInEvaluate: false, signals: [] };
  },

  evaluate(snapshot) {
    const signal = snapshot.signals.find((s) => s.name === SIGNAL);
    if (signal === undefined) throw `${SIGNAL} is missing`;
    if (signal.capacity === undefined) throw `${SIGNAL} has no capacity`;
    const threshold = signal.capacity / 10;
    const met = signal.value < threshold ? 'hard' : 'not-met';
    const condition = met === 'hard' ? { name: 'MemoryPressure', effects: ['NoSchedule'] } : undefined;
    return {
      thresholds: [{
        met, scope: SCOPE, signal: SIGNAL, observed: signal.value, threshold,
        gracePeriodSeconds: 0n, condition,
      }],
      softCandidates: [],
      forceEvictions: [],
      state: undefined,
    };
  },

  topVictims(snapshot, scope, n) {
    if (scope !== SCOPE) throw `unknown scope ${scope}`;
    // A usage the host could not read is absent (`undefined`): 0 here.
    const used = (p) => p.usage.memoryWorkingSetBytes ?? 0n;
    const pods = [...snapshot.pods].sort((a, b) =>
      used(a) !== used(b) ? (used(a) > used(b) ? -1 : 1) : a.uid < b.uid ? -1 : a.uid > b.uid ? 1 : 0);
    return pods.slice(0, n).map((p) => ({
      uid: p.uid,
      reason: `uses ${used(p) >> 20n} MiB of memory`,
      gracePeriodSeconds: undefined,
    }));
  },
});
