"""A memory-stall eviction strategy in Python: vigil's psi-pressure, again.

Watches `psi.memory.some.avg10` (the share of the last 10 s in which some task
stalled on memory). Above 40 the hard threshold is met and the strategy wants
a pod evicted now; above 20 the soft one is met and eviction waits out a 30 s
grace period. Once met, a threshold holds until the stall falls 5 points below
it (minimum reclaim), so eviction does not flap. While either holds, the node
reports MemoryPressure. Victims are ranked as the kubelet ranks them under
memory pressure: pods above their request first, then lower priority, then
the larger excess, then UID.

Config (JSON, every field optional; numbers or numeric strings):
{"signal": "psi.memory.some.avg10", "hard": 40, "soft": 20,
 "softGracePeriodSeconds": 30, "minimumReclaim": 5}
"""

import json
from functools import cmp_to_key

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
from wit_world.imports import log
from wit_world.imports.types import Interest

SCOPE = "psi-memory"
DEFAULTS = {
    "signal": "psi.memory.some.avg10",
    "hard": 40.0,
    "soft": 20.0,
    "softGracePeriodSeconds": 30,
    "minimumReclaim": 5.0,
}


def number(field, value):
    """A threshold amount from the config: a number or a numeric string."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise Err(f"$.{field}: `{value}` is not a number")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise Err(f"$.{field}: must be a non-negative number")
    return float(value)


def configure(config):
    """The thresholds: the defaults with the config's fields applied."""
    try:
        value = json.loads(config if config.strip() else "{}")
    except ValueError as e:
        raise Err(f"config is not JSON: {e}")
    if not isinstance(value, dict):
        raise Err("config must be a JSON object")
    settings = dict(DEFAULTS)
    for field, item in value.items():
        if field == "signal":
            if not isinstance(item, str):
                raise Err("$.signal: must be a string")
            settings[field] = item
        elif field in ("hard", "soft", "minimumReclaim"):
            settings[field] = number(field, item)
        elif field == "softGracePeriodSeconds":
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise Err(f"$.{field}: must be a non-negative integer")
            settings[field] = item
        else:
            raise Err(f"$.{field}: unknown field")
    return settings


def observe(snapshot):
    """The thresholds and the signal they watch."""
    settings = configure(snapshot.config)
    for signal in snapshot.signals:
        if signal.name == settings["signal"]:
            return settings, signal
    raise Err(f"signal {settings['signal']} is missing from the snapshot")


def judge(settings, observed, last):
    """(level, threshold, grace period) for the observed stall."""
    reclaim = settings["minimumReclaim"]

    def pressed(threshold, held):
        return observed > threshold - (reclaim if held else 0.0)

    hard, soft = settings["hard"], settings["soft"]
    if pressed(hard, last == MetLevel.HARD):
        return MetLevel.HARD, hard, 0
    if pressed(soft, last != MetLevel.NOT_MET):
        return MetLevel.SOFT, soft, settings["softGracePeriodSeconds"]
    return MetLevel.NOT_MET, soft, 0


def last_met(snapshot):
    """How this strategy's threshold was met last cycle."""
    for scope in snapshot.last_met:
        if scope.scope == SCOPE:
            return scope.met
    return MetLevel.NOT_MET


def working_set(p):
    """A pod's working set; 0 when the host could not read it."""
    return p.usage.memory_working_set_bytes or 0


def cmp(a, b):
    return (a > b) - (a < b)


def memory_rank(a, b):
    """Negative when pod a is evicted before pod b."""
    def exceeds(p):
        return working_set(p) > p.requests.memory_bytes

    def excess(p):
        return working_set(p) - p.requests.memory_bytes

    return (
        cmp(exceeds(b), exceeds(a))
        or cmp(a.priority, b.priority)
        or cmp(excess(b), excess(a))
        or cmp(a.uid, b.uid)
    )


class Strategy(wit_world.exports.Strategy):
    def declare_interest(self, config):
        """Pressure is judged from signals (pods only rank victims): no label
        is read, no pod fact nor signal beyond the kubelet's, and evaluate
        needs no pods."""
        return StrategyInterest(Interest([], [], []), False, [])

    def evaluate(self, snapshot):
        settings, signal = observe(snapshot)
        last = last_met(snapshot)
        met, threshold, grace = judge(settings, signal.value, last)
        condition = None
        if met != MetLevel.NOT_MET:
            condition = Condition("MemoryPressure", ["NoSchedule"])
        if met != last:
            log.log(log.Level.INFO, f"{signal.name} is {signal.value:.1f}: {met.name.lower()}")
        return Decision(
            [Threshold(met, SCOPE, signal.name, signal.value, threshold, grace, condition)],
            [],
            [],
            None,
        )

    def top_victims(self, snapshot, scope, n):
        if scope != SCOPE:
            raise Err(f'unknown scope "{scope}"; psi-pressure answers for "{SCOPE}"')
        _, signal = observe(snapshot)
        ranked = sorted(snapshot.pods, key=cmp_to_key(memory_rank))
        return [
            Eviction(
                pod.uid,
                f"{signal.name} is {signal.value:.1f}; pod uses "
                f"{working_set(pod) >> 20} MiB of memory "
                f"against a request of {pod.requests.memory_bytes >> 20} MiB",
                None,
            )
            for pod in ranked[:n]
        ]
