"""An engine's own decoding-loop overhead (HF transformers `generate`), stored in the profile.

HF `generate` runs its logits processors and stopping criteria every step, and assisted generation
calls the assistant's own `generate` every round, so the speedup an engine's user gets needs that
engine's loop cost, in the shape of polyplan's (`formats.overhead.LoopOverhead`):

- `per_step_s`: one autoregressive step (target-only, and each of the assistant's drafting steps);
- `per_round_s`: one assisted round (the assistant's call set-up, the candidates' check, the cache);
- `per_call_s`: one `generate` call's fixed set-up, fitted apart so it does not leak into the two.

`engines.hf_overhead` measures seconds outside the models' passes; this module fits
loop = calls × per_call + steps × per_step + rounds × per_round (`planner.exact.overhead.fit_loop_costs`)
and reads and writes the profile's `engine_overhead["hf"][sampling]`. Pure: no torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from polyplan.formats.overhead import LoopOverhead
from polyplan.formats.profile import EngineCalibration, Profile
from polyplan.planner.exact.overhead import fit_loop_costs, profile_overhead

HF = "hf"
_MEASURED_ENGINES = (HF,)  # vLLM and llama.cpp cannot be run here: their predictions keep polyplan's loop


@dataclass(frozen=True)
class LoopCounts:
    """What one timed engine call did: `generate` calls, autoregressive steps, verification rounds."""

    calls: int
    steps: int
    rounds: int


@dataclass(frozen=True)
class EngineOverhead:
    """An engine's loop cost per step and per round (`loop`), and per `generate` call."""

    loop: LoopOverhead
    per_call_s: float


def fit_engine_overhead(counts: Sequence[LoopCounts], loop_seconds: Sequence[float]) -> EngineOverhead:
    """The engine's per-call, per-step and per-round costs from each configuration's counts and
    median loop time (seconds outside forward passes). Needs configurations that vary the
    three independently: target-only decoding at two lengths, assisted at two or more K."""
    per_call, per_step, per_round = fit_loop_costs([(c.calls, c.steps, c.rounds) for c in counts], loop_seconds)
    return EngineOverhead(LoopOverhead(per_step_s=per_step, per_round_s=per_round), per_call)


def engine_overhead_entry(
    overhead: EngineOverhead, *, fingerprint: str, details: dict[str, Any] | None = None
) -> EngineCalibration:
    """The profile's entry for one engine and sampling mode."""
    return EngineCalibration(overhead.loop.per_step_s, overhead.loop.per_round_s, float(overhead.per_call_s),
                             fingerprint, dict(details or {}))


def _entry(profile: Profile, engine: str, sampling: str) -> EngineCalibration | None:
    return profile.engine_overhead.get(engine, {}).get(sampling)


def profile_engine_overhead(profile: Profile, engine: str, sampling: str) -> LoopOverhead | None:
    """The loop overhead `profile` records for `engine` at `sampling` (None: not measured)."""
    entry = _entry(profile, engine, sampling)
    return None if entry is None else entry.overhead


def profile_call_seconds(profile: Profile, engine: str, sampling: str) -> float | None:
    """The per-`generate`-call cost `profile` records for `engine` at `sampling` (None: not
    measured, or an entry written before polyplan stored it)."""
    entry = _entry(profile, engine, sampling)
    return None if entry is None else entry.per_call_s


def stored_fingerprint(profile: Profile, engine: str, sampling: str) -> str | None:
    """The fingerprint of the stored entry (None: none)."""
    entry = _entry(profile, engine, sampling)
    return None if entry is None else entry.fingerprint


@dataclass(frozen=True)
class PredictionOverhead:
    """The loop overhead an engine's prediction uses, and one line saying which it is."""

    overhead: LoopOverhead | None
    note: str


def prediction_overhead(profile: Profile, engine: str, sampling: str) -> PredictionOverhead:
    """HF: its measured overhead when the profile has it, else polyplan's (said so); vLLM and
    llama.cpp: polyplan's (they cannot be measured here)."""
    ours = profile_overhead(profile, sampling)
    ours_text = "none measured" if ours is None else _text(ours)
    if engine in _MEASURED_ENGINES:
        theirs = profile_engine_overhead(profile, engine, sampling)
        if theirs is not None:
            return PredictionOverhead(theirs, f"loop overhead: HF generate's own, measured ({_text(theirs)})")
        return PredictionOverhead(
            ours, f"loop overhead: HF overhead not measured; prediction uses polyplan's loop overhead ({ours_text}); "
                  "re-run polyplan recommend --candidates to measure it"
        )
    return PredictionOverhead(
        ours, f"loop overhead: polyplan's ({ours_text}); {engine}'s own loop is not measured by polyplan"
    )


def _text(overhead: LoopOverhead) -> str:
    return f"{overhead.per_step_s * 1e6:.0f} us/step + {overhead.per_round_s * 1e6:.0f} us/round"
