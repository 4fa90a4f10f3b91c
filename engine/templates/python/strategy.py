"""__NAME__: an eviction strategy for vigil.

The threshold is met (hard) while `memory.available` is below a tenth of the
node's memory; the victims are the pods using the most memory. Make it yours:
read your settings from `snapshot.config` (JSON, `policies.__NAME__.config`)
and `raise Err("why")` when they are wrong or a signal is missing — any other
exception is a fault, and its traceback's last lines are in the fault.
"""

import wit_world
from componentize_py_types import Err
from wit_world.exports.strategy import (
    Condition,
    Decision,
    Eviction,
    MetLevel,
    StrategyInterest,
    Threshold,
)
from wit_world.imports.types import Interest

SIGNAL = "memory.available"
SCOPE = "memory"


class Strategy(wit_world.exports.Strategy):
    def declare_interest(self, config):
        # No labels, annotations or pod facts read; evaluate judges the
        # kubelet's signals only (name others in the last field to get them).
        return StrategyInterest(Interest([], [], []), False, [])

    def evaluate(self, snapshot):
        signal = next((s for s in snapshot.signals if s.name == SIGNAL), None)
        if signal is None:
            raise Err(f"{SIGNAL} is missing")
        if signal.capacity is None:
            raise Err(f"{SIGNAL} has no capacity")
        threshold = signal.capacity / 10
        met = MetLevel.HARD if signal.value < threshold else MetLevel.NOT_MET
        condition = None
        if met == MetLevel.HARD:
            condition = Condition("MemoryPressure", ["NoSchedule"])
        return Decision(
            [Threshold(met, SCOPE, SIGNAL, signal.value, threshold, 0, condition)], [], [], None
        )

    def top_victims(self, snapshot, scope, n):
        if scope != SCOPE:
            raise Err(f"unknown scope {scope}")
        # A usage the host could not read is absent (None): 0 here.
        def used(p):
            return p.usage.memory_working_set_bytes or 0

        pods = sorted(snapshot.pods, key=lambda p: (-used(p), p.uid))
        return [Eviction(p.uid, f"uses {used(p) >> 20} MiB of memory", None) for p in pods[:n]]
