"""A profiling time budget: what it is, what each stage will cost, and how many prompts fit.

`--budget 5m` bounds the wall time of a profiling run. The latency curves come first and are
always measured (every price depends on them); from them this module prices the rest before it
runs (docs/profiling.md, "A time budget"):

    target stream      per prompt and sampling mode: prefill(n_i) + new_tokens · T_1(1)
    teacher-forced     per prompt, sampling mode and model m: prefill_m(n_i) + ⌈new_tokens / w⌉ · T_m(w)
    decoded run        per pair and K: prompts · (new_tokens / μ(K)) · (K · T_d(1) + T_v(K + 1))
    calibrations       the loop overhead, HF's loop and the switch costs, by their calls

with w the teacher-forcing width and μ(K) the implied tokens per verification. The essentials
(the stream and the teacher-forced reads on at least `MIN_PROMPTS` prompts, and the calibrations)
must fit, else the run stops with the least it needs; prompts are then taken in order while
they fit; decoded runs, which only check the paper's eq. 3 and never change the exact model's
choice, are measured while they fit and otherwise listed as what more time would buy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from polyplan.formats.errors import PolyplanError
from polyplan.planner.exact.latency import LatencyCurve
from polyplan.profiler.loop_overhead import STAND_IN_STEP_S
from polyplan.profiler.switching import SWITCH_PASSES_AFTER, SWITCH_REPEATS

MIN_PROMPTS = 4  # fewer prompts give no bootstrap interval worth the name
_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")
CALIBRATION_STEPS = 57  # target steps per calibration token, read off a cold profile of the shipped family


@dataclass(frozen=True)
class Budget:
    """A wall-time budget in `seconds`, as the user wrote it (`text`)."""

    seconds: float
    text: str


def parse_budget(text: str, option: str = "--budget") -> Budget:
    """`text` such as "90s", "5m", "1.5h" or "1h30m" as a `Budget`.

    Raises:
        PolyplanError: no unit, a unit other than s, m or h, or not more than zero.
    """
    cleaned = text.strip().lower()
    position, seconds = 0, 0.0
    for match in _PART.finditer(cleaned):
        if match.start() != position or not match.group(0):
            break
        number, unit = match.groups()
        if unit not in _UNITS:
            if not unit and float(number) == 0:  # zero needs no unit to be refused as zero
                position = match.end()
                continue
            if not unit:
                raise PolyplanError(f"{option}: give a unit, e.g. {number}m or {number}s (got {text!r})")
            raise PolyplanError(f"{option}: unknown unit {unit!r} in {text!r} (use s, m or h, e.g. 5m or 90s)")
        seconds += float(number) * _UNITS[unit]
        position = match.end()
    if position != len(cleaned) or not cleaned:
        raise PolyplanError(f"{option}: cannot read {text!r} as a duration (e.g. 5m, 90s, 1h30m)")
    if not seconds > 0:
        raise PolyplanError(f"{option}: must be more than 0 seconds, got {text!r}")
    return Budget(seconds, text.strip())


def duration_text(seconds: float) -> str:
    """Seconds as the budget's own unit words: "45 s", "3 min 20 s", "1 h 05 min"."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min {rest:02d} s"
    hours, rest = divmod(round(seconds / 60), 60)
    return f"{hours} h {rest:02d} min"


@dataclass(frozen=True)
class MemberCost:
    """What one model's passes cost: its latency curve and its prefill time at a prompt length."""

    curve: LatencyCurve
    prefill_points: tuple[tuple[int, float], ...] = ()  # (tokens, seconds) measured from an empty cache

    def prefill(self, tokens: int) -> float:
        """Seconds to read `tokens` prompt tokens: the measured prefill, interpolated (and beyond
        the longest, scaled by tokens), else the curve's T(tokens)."""
        if tokens <= 0:
            return 0.0
        if not self.prefill_points:
            return self.curve(tokens)
        lengths = [length for length, _ in self.prefill_points]
        times = [seconds for _, seconds in self.prefill_points]
        if tokens >= lengths[-1]:
            return times[-1] * tokens / lengths[-1]
        if tokens <= lengths[0]:
            return times[0] * tokens / lengths[0] if len(lengths) == 1 else times[0]
        return float(_interpolate(tokens, lengths, times))


def _interpolate(x: float, xs: Sequence[float], ys: Sequence[float]) -> float:
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[-1]


@dataclass(frozen=True)
class AcceptanceCost:
    """The acceptance stage's price per prompt (the target's streams and every model's
    teacher-forced reads, over all sampling modes), in the prompts' order."""

    per_prompt_s: tuple[float, ...]

    def prompts_within(self, seconds: float) -> int:
        """How many prompts, taken in order, fit in `seconds`."""
        spent, count = 0.0, 0
        for cost in self.per_prompt_s:
            if spent + cost > seconds:
                break
            spent, count = spent + cost, count + 1
        return count

    def seconds_for(self, prompts: int) -> float:
        return float(sum(self.per_prompt_s[:prompts]))


def acceptance_cost(target: str, costs: Mapping[str, MemberCost], prompt_lengths: Sequence[int], *, new_tokens: int,
                    modes: int, width: int, greedy: bool = False) -> AcceptanceCost:
    """The price of the acceptance stage per prompt (module docstring): `costs` by model name,
    the target's among them; `modes` sampling modes; `width` tokens per teacher-forced pass;
    `greedy`: one of the modes is greedy, where the target's own read is its continuation and
    costs nothing (`profiler.acceptance.own_greedy_read`)."""
    passes = math.ceil(new_tokens / width)
    per_prompt = []
    for length in prompt_lengths:
        stream = costs[target].prefill(length) + new_tokens * costs[target].curve(1)
        forced = {name: cost.prefill(length) + passes * cost.curve(width) for name, cost in costs.items()}
        per_prompt.append(modes * (stream + sum(forced.values())) - (forced[target] if greedy else 0.0))
    return AcceptanceCost(tuple(per_prompt))


def calibration_seconds(target: MemberCost, *, tokens: int, modes: int, costs: Mapping[str, MemberCost] | None = None,
                        context: int = 128) -> float:
    """The loop calibrations' price (the loop overhead, HF's loop, the switch costs) per sampling
    mode: `CALIBRATION_STEPS` target steps per token of a timed call; docs/profiling.md, "A time
    budget", says how that count was read and how close the estimate comes. A target whose step
    takes `STAND_IN_STEP_S` or more has its loop calibrated around stand-in verifiers at no
    model cost, so what is left is the switch costs, priced from their own loop
    (`switch_seconds`; `costs`: every model's, by name)."""
    if costs is not None and target.curve(1) >= STAND_IN_STEP_S:
        return switch_seconds(costs, context=context)
    return modes * CALIBRATION_STEPS * tokens * target.curve(1)


def switch_seconds(costs: Mapping[str, MemberCost], *, context: int = 128, repeats: int = SWITCH_REPEATS,
                   after: int = SWITCH_PASSES_AFTER) -> float:
    """The switch costs' price (`profiler.switching.measure_switch_costs`): every model primed
    over `context` tokens, then for each model `repeats` + 1 rounds of the costliest other model's
    pass and twice `after` of its own (its size read from its step)."""
    primed = sum(cost.prefill(context) for cost in costs.values())
    rounds = 0.0
    for name, cost in costs.items():
        other = max((c.curve(1) for n, c in costs.items() if n != name), default=None)
        if other is not None:
            rounds += other + 2 * after * cost.curve(1)
    return primed + (repeats + 1) * rounds


def decoded_seconds(verifier: MemberCost, drafter: MemberCost, k: int, mu: float, *, prompts: int, new_tokens: int) -> float:
    """A decoded run's price: `prompts` prompts of `new_tokens`, each round K drafting passes and
    one verification of K + 1 tokens, emitting `mu` tokens."""
    rounds = new_tokens / max(mu, 1.0)
    return prompts * rounds * (k * drafter.curve(1) + verifier.curve(k + 1))


@dataclass(frozen=True)
class BudgetPlan:
    """How a budget is spent after the latency curves: prompts for acceptance and the estimates."""

    budget: Budget
    spent_s: float  # on the latency curves (and anything before)
    prompts: int  # prompts the acceptance stage takes (a prefix of the run's prompts)
    available: int  # prompts the run was given
    acceptance_s: float  # estimated, for `prompts`
    calibration_s: float  # estimated
    acceptance_s_all: float = 0.0  # estimated, for every available prompt
    reserve_s: float = 0.0  # kept for what the command runs after the profile (recommend's self-check)

    @property
    def left_s(self) -> float:
        """Estimated seconds left for the optional measurements (the decoded runs)."""
        return self.budget.seconds - self.spent_s - self.acceptance_s - self.calibration_s - self.reserve_s

    def lines(self) -> tuple[str, ...]:
        """What the plan is, in words, for the log."""
        kept = "" if not self.reserve_s else f", the self-check after it about {duration_text(self.reserve_s)}"
        lines = [f"budget {self.budget.text}: loading and latency curves took {duration_text(self.spent_s)}; acceptance on "
                 f"{self.prompts} of {self.available} prompts about {duration_text(self.acceptance_s)}, the loop "
                 f"calibrations about {duration_text(self.calibration_s)}{kept}"]
        if self.prompts < self.available:
            lines.append(f"budget {self.budget.text}: the other {self.available - self.prompts} prompts would take about "
                         f"{duration_text(self.acceptance_s_all - self.acceptance_s)} more (narrower acceptance intervals)")
        return tuple(lines)


def plan_budget(budget: Budget, spent_s: float, cost: AcceptanceCost, calibration_s: float,
                reserve_s: float = 0.0) -> BudgetPlan:
    """The prompts the acceptance stage may take within `budget` after `spent_s`, keeping
    `reserve_s` for what the command runs after the profile (recommend's self-check).

    Raises:
        PolyplanError: not even `MIN_PROMPTS` prompts, the calibrations and the reserve fit; the
            message says the least budget that would.
    """
    available = len(cost.per_prompt_s)
    least = min(MIN_PROMPTS, available)
    left = budget.seconds - spent_s - calibration_s - reserve_s
    prompts = min(available, cost.prompts_within(left))
    if prompts < least:
        needed = spent_s + calibration_s + reserve_s + cost.seconds_for(least)
        after = "" if not reserve_s else " and the self-check"
        raise PolyplanError(
            f"--budget {budget.text}: too small to measure the target on this machine: loading the models and their latency curves took "
            f"{duration_text(spent_s)}, acceptance on {least} prompts, the loop calibrations{after} need about "
            f"{duration_text(needed - spent_s)} more; give at least --budget {math.ceil(needed / 60)}m "
            "(the curves measured are kept and reused)")
    return BudgetPlan(budget, spent_s, prompts, available, cost.seconds_for(prompts), calibration_s,
                      acceptance_s_all=cost.seconds_for(available), reserve_s=reserve_s)


@dataclass(frozen=True)
class BudgetClock:
    """A budget and when its command began (`time.perf_counter`), with what the run needs to price
    the calibrations that follow it (`calibration_tokens` per timed call)."""

    budget: Budget
    started: float
    calibration_tokens: int = 64
    # what the command runs after the profile, priced from the target's costs and the prompts'
    # lengths once its latency curve is timed (recommend's self-check: `validation.self_check.least_check_s`)
    reserve: Callable[[MemberCost, Sequence[int]], float] | None = None

    def elapsed(self, now: float) -> float:
        return now - self.started

    def left(self, now: float) -> float:
        """Seconds of the budget not yet spent at `now`."""
        return self.budget.seconds - self.elapsed(now)


@dataclass(frozen=True)
class SkippedMeasurement:
    """A measurement the budget left out: what it is and about how long it would have taken."""

    label: str
    seconds: float


def skipped_lines(budget: Budget, skipped: Sequence[SkippedMeasurement]) -> tuple[str, ...]:
    """What more time would have bought, in one line (none when nothing was left out)."""
    if not skipped:
        return ()
    total = sum(item.seconds for item in skipped)
    return (f"budget {budget.text}: left out {len(skipped)} decoded run(s), about {duration_text(total)} more "
            "(they check the paper's eq. 3 by decoding; the exact model's choice does not read them): "
            + ", ".join(item.label for item in skipped),)
