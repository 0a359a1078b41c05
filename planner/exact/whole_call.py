"""Whole `generate` calls: what a race measures, predicted from the profile.

The cost model predicts seconds per decoded token; a race times whole calls (Spec-Bench's
tokens/s), so each call also pays its set-up (`planner.exact.engine_overhead`) and the prompt's
prefill, by the target and, in assisted generation, by the drafter (HF prompt lookup has no model,
so no drafter prefill). For one call with a prompt of L tokens that emits N new tokens:

    seconds = per_call + P_target(L + extra) + P_drafter(L) + N × per_token − replaced

- `per_token`: the cost model's seconds per emitted token (forward passes and loop);
- `extra`: tokens the target's first pass reads besides the prompt (HF's assisted loop reads the
  prompt and the K drafted tokens in its first verification);
- `replaced`: decode work N × per_token counts that the prefill passes do instead (target-only:
  one T_target(1); assisted: the first verification T_target(K + 1) and the drafter's first step).

P(L) is piecewise linear in L through (0, 0) and the measured context lengths, continuing the last
slope beyond them. The speedup over a set of calls is Σ tokens / Σ seconds over the baseline's.
Pure: no torch, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import ModelProfile


@dataclass(frozen=True)
class PrefillCurve:
    """P(L): seconds to prefill a prompt of L tokens, from measured `context_lengths` (increasing)."""

    context_lengths: tuple[int, ...]
    seconds: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.context_lengths or len(self.context_lengths) != len(self.seconds):
            raise PolyplanError("prefill: need as many times as context lengths, and at least one")
        if self.context_lengths[0] <= 0 or any(b <= a for a, b in zip(self.context_lengths, self.context_lengths[1:])):
            raise PolyplanError(f"prefill: context lengths must be > 0 and increase, got {list(self.context_lengths)}")
        if not all(math.isfinite(s) and s >= 0 for s in self.seconds):
            raise PolyplanError(f"prefill: times must be finite and >= 0, got {list(self.seconds)}")

    def __call__(self, length: float) -> float:
        xs = np.asarray((0,) + self.context_lengths, dtype=float)
        ys = np.asarray((0.0,) + self.seconds, dtype=float)
        if length <= xs[-1]:
            return float(np.interp(length, xs, ys))
        slope = max((ys[-1] - ys[-2]) / (xs[-1] - xs[-2]), 0.0)
        return float(ys[-1] + slope * (length - xs[-1]))


def prefill_curve(model: ModelProfile) -> PrefillCurve | None:
    """The profile's prefill curve of `model` (None: the profile has no prefill times for it)."""
    if not model.prefill:
        return None
    by_length = {p.context_length: p.median_s for p in model.prefill}
    lengths = sorted(by_length)
    return PrefillCurve(tuple(lengths), tuple(by_length[c] for c in lengths))


@dataclass(frozen=True)
class CallModel:
    """One configuration's cost of a whole `generate` call (module docstring)."""

    per_token_s: float
    per_call_s: float
    target_prefill: PrefillCurve | None  # None: not in the profile (left out, said so by the caller)
    drafter_prefill: PrefillCurve | None = None  # None: no drafter model (target-only, prompt lookup)
    extra_tokens: int = 0
    replaced_s: float = 0.0

    def seconds(self, prompt_tokens: int, new_tokens: int) -> float:
        """Predicted seconds of one call reading `prompt_tokens` and emitting `new_tokens`."""
        target = 0.0 if self.target_prefill is None else self.target_prefill(prompt_tokens + self.extra_tokens)
        drafter = 0.0 if self.drafter_prefill is None else self.drafter_prefill(prompt_tokens)
        decode = max(new_tokens * self.per_token_s - self.replaced_s, 0.0)
        return self.per_call_s + target + drafter + decode


@dataclass(frozen=True)
class CallCount:
    """One timed call of the bench: its prompt's tokens and the new tokens it emitted."""

    prompt_tokens: int
    new_tokens: int


def whole_call_speedup(
    baseline: CallModel, model: CallModel, baseline_calls: Sequence[CallCount], calls: Sequence[CallCount]
) -> float:
    """Spec-Bench's speedup of `model` over `baseline` predicted for these calls: (Σ new tokens /
    Σ predicted seconds) over the baseline's, each side on its own calls."""
    if not calls or not baseline_calls:
        raise PolyplanError("whole_call_speedup: no calls")
    rate = sum(c.new_tokens for c in calls) / sum(model.seconds(c.prompt_tokens, c.new_tokens) for c in calls)
    base = sum(c.new_tokens for c in baseline_calls) / sum(baseline.seconds(c.prompt_tokens, c.new_tokens) for c in baseline_calls)
    return rate / base
