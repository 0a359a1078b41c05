"""What the exact model reads beyond the profiling run's entries, measured resumably.

After `profiler.run.profile_models`, the exact cost model still needs the greedy agreement
sequence of every pair (`profiler.agreement_runs`), the decoding loop's own overhead per sampling
mode (`profiler.loop_overhead`), HF `generate`'s loop overhead (`engines.hf_overhead`, for the HF
export) and each model's switch cost (`profiler.switching`). Each entry carries a fingerprint of
what it was measured from, so a rerun with nothing changed plans on exactly the same numbers;
`fresh` re-times the loop overhead and the switch costs anyway (timings go stale with the load).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from polyplan.formats.profile import AgreementRuns, LoopCalibration, Profile
from polyplan.formats.sampling import SamplingMode
from polyplan.engines.hf_overhead import ensure_hf_overhead
from polyplan.models.hashing import fingerprint_settings, fingerprint_tokens
from polyplan.profiler.prompts import EncodedPrompt, token_stream
from polyplan.profiler.acceptance import GreedyReads
from polyplan.profiler.agreement_runs import ensure_agreement, measure_agreement, runs_fingerprint
from polyplan.profiler.settings import ProfileSettings
from polyplan.profiler.loop_overhead import STAND_IN_STEP_S
from polyplan.profiler.switching import measure_switch_costs, store_switch_costs


@dataclass(frozen=True)
class LoopCostsRun:
    """What `ensure_loop_costs` measured: how many entries, and the seconds each step took."""

    measured: int
    agreement_s: float
    loop_overhead_s: float
    hf_overhead_s: float
    switch_costs_s: float

    @property
    def seconds(self) -> float:
        return self.agreement_s + self.loop_overhead_s + self.hf_overhead_s + self.switch_costs_s


def ensure_loop_costs(
    profile: Profile,
    models: Sequence,
    prompts: Sequence[EncodedPrompt],
    settings: ProfileSettings,
    *,
    previous_runs: AgreementRuns | None,
    device_label: str,
    calibration_tokens: int = 64,
    fresh: bool = False,
    reads: GreedyReads | None = None,
    hf_overhead: bool = True,
) -> tuple[Profile, LoopCostsRun]:
    """`profile` with every entry of the module docstring, and what was measured. `models`: the
    `models.fingerprints.ProfiledModel`s, target first; `prompts`: those the run profiled with;
    `previous_runs`: the agreement entry before the run; `calibration_tokens`: the most tokens per
    timed call of the loop calibrations (`calibration_tokens_for`); `reads`: the greedy reads of
    the profiling run (`profiler.run.ProfileOutcome.greedy`), which the agreement runs reuse;
    `hf_overhead` False: HF generate's own loop overhead is left as it is (measured or not), for
    a run whose plan and validation never read it."""
    acceptance = settings.acceptance
    calibration_tokens = calibration_tokens_for(profile, models[0].name, calibration_tokens)
    context = min(settings.latency.context_lengths)
    stream = token_stream([prompt.ids for prompt in prompts], context + 1)

    def agreement(profile: Profile) -> tuple[Profile, int]:  # greedy only: the agreement sequences are argmax matches
        if 0.0 not in acceptance.temperatures:
            return profile, 0
        ids = [prompt.ids for prompt in prompts]
        return ensure_agreement(profile, previous_runs, models, ids, new_tokens=acceptance.new_tokens, seed=acceptance.seed,
                                reads=reads)

    steps = (
        agreement,
        lambda profile: _ensure_loop_overhead(profile, models[0], acceptance.temperatures, calibration_tokens, device_label, fresh=fresh),
        lambda profile: (ensure_hf_overhead(profile, models, prompts[0].ids, acceptance.temperatures, tokens=calibration_tokens)
                         if hf_overhead else (profile, 0)),
        lambda profile: _ensure_switch_costs(profile, models, stream, context, device_label, fresh=fresh),
    )
    measured, seconds = 0, []
    for step in steps:
        began = time.perf_counter()
        profile, count = step(profile)
        measured += count
        seconds.append(time.perf_counter() - began)
    return profile, LoopCostsRun(measured, *seconds)


def provisional_agreement(profile: Profile, models: Sequence, prompts: Sequence[Sequence[int]], settings: ProfileSettings,
                          reads: GreedyReads | None) -> Profile:
    """`profile` (a profiling run's, α on the first `len(prompts)` prompts) with the greedy
    agreement sequences of those prompts, for sequential measuring's rule: the stored entry where
    its fingerprint is of them, else made from `reads` (nothing read again) for the pairs whose
    models both have a teacher-forced pass in them, else (no reads: a run resuming a round an
    earlier run measured) measured. Without greedy acceptance, `profile` as it is; pairs left out
    are ranked on their α alone."""
    acceptance = settings.acceptance
    if 0.0 not in acceptance.temperatures:
        return profile
    loaded = {model.name for model in models}
    pairs = [(pair.verifier, pair.drafter) for pair in profile.pairs
             if "greedy" in pair.sampling and {pair.verifier, pair.drafter} <= loaded]
    stored = profile.acceptance_runs.get("greedy")
    key = runs_fingerprint(models, prompts, acceptance.new_tokens, acceptance.seed)
    if stored is not None and stored.fingerprint == key and set(stored.by_pair()) >= set(pairs):
        return profile
    if reads is not None:
        pairs = [pair for pair in pairs if set(pair) <= set(reads.forced)]
    entry = measure_agreement(models, pairs, prompts, new_tokens=acceptance.new_tokens, seed=acceptance.seed, reads=reads)
    return replace(profile, acceptance_runs={**profile.acceptance_runs, "greedy": entry})


CALIBRATION_CALL_S = 2.5  # about the longest one calibration call of the target alone should take
MIN_CALIBRATION_TOKENS = 16


def calibration_tokens_for(profile: Profile, target: str, most: int) -> int:
    """Tokens per calibration call: `most`, or for a target whose one-token step (the profile's
    T(1)) would make a call of `most` tokens take longer than `CALIBRATION_CALL_S`, the largest
    power of two that fits (at least `MIN_CALIBRATION_TOKENS`; docs/profiling.md, "What it
    measures"). A power of two, so that a re-timed T(1) rarely changes it (it is part of the
    entries' fingerprints)."""
    step = target_step(profile, target)
    if step is None or step <= 0:
        return most
    fits = CALIBRATION_CALL_S / step
    if fits >= most:
        return most
    return min(most, max(MIN_CALIBRATION_TOKENS, 2 ** int(math.log2(max(fits, 1.0)))))


def _ensure_loop_overhead(
    profile: Profile, target, temperatures: Sequence[float], tokens: int, device_label: str, *, fresh: bool = False
) -> tuple[Profile, int]:
    """`profile` with the loop overhead of each sampling mode in `temperatures` (and no other),
    reusing an entry whose fingerprint holds unless `fresh`; and how many were measured. A target
    whose step takes at least `STAND_IN_STEP_S` is calibrated with a stand-in verifier
    (`loop_with_stand_ins`)."""
    old = profile.loop_overhead
    stand_ins = loop_with_stand_ins(profile, target.name)
    table, measured = {}, 0
    for temperature in temperatures:
        mode = SamplingMode(temperature).key
        fingerprint = fingerprint_settings(
            "loop-overhead", target.fingerprint, target.member.valid_vocab_size, mode, tokens, device_label, torch.get_num_threads(),
            *(("stand-in verifier",) if stand_ins else ()),
        )
        kept = old.get(mode)
        if not fresh and kept is not None and kept.fingerprint == fingerprint:
            table[mode] = kept
            continue
        table[mode] = _loop_overhead_entry(target.member, temperature, tokens, fingerprint=fingerprint, stand_ins=stand_ins)
        measured += 1
    return replace(profile, loop_overhead=table), measured


def loop_with_stand_ins(profile: Profile, target: str) -> bool:
    """Whether the loop overhead is calibrated around a stand-in verifier instead of the target:
    where the target's step (the profile's T(1)) takes at least `STAND_IN_STEP_S`. Around the
    target, the loop runs as in a chain (its data evicted by each pass) but every call pays the
    target's passes, minutes on a large model, to fit a cost that is then a fraction of a percent
    of a step; the stand-ins do the loop's own work (the vocabulary's sampling, verification,
    crops) at no model cost, and miss only the eviction, a share of that fraction.
    docs/profiling.md, "What it measures"."""
    step = target_step(profile, target)
    return step is not None and step >= STAND_IN_STEP_S


def target_step(profile: Profile, target: str) -> float | None:
    """The target's one-token step in the profile: its shortest T(1) over the context lengths
    (None: no T(1) of it), what the loop calibrations size themselves by."""
    steps = [point.median_s for point in profile.model(target).latency if point.k == 1] if target in profile.model_names() else []
    return min(steps) if steps else None


def _loop_overhead_entry(target, temperature: float, tokens: int = 64, *, fingerprint: str | None = None,
                         stand_ins: bool = False) -> LoopCalibration:
    """The profile's loop-overhead entry for the target's vocabulary and device, with `fingerprint`
    (`stand_ins`: a stand-in verifier in place of the target)."""
    from polyplan.decoder.sampling import Sampling
    from polyplan.profiler.loop_overhead import measure_loop_overhead

    overhead = measure_loop_overhead(
        target.valid_vocab_size, sampling=Sampling(temperature=temperature), device=getattr(target, "device", "cpu"),
        tokens=tokens, repeats=3, verifier=None if stand_ins else target,
    )
    verifier = "a stand-in verifier (the target's step is long)" if stand_ins else "the target"
    return LoopCalibration(
        overhead.per_step_s, overhead.per_round_s, vocab=target.valid_vocab_size, threads=torch.get_num_threads(),
        method=f"decoding loop time outside forward passes, {verifier} verifying a stand-in drafter "
               "at block sizes 1..8 and decoding alone, fitted per step and per round (profiler.loop_overhead)",
        fingerprint=fingerprint,
    )


def _ensure_switch_costs(profile: Profile, models: Sequence, stream: Sequence[int], context: int, device_label: str,
                        *, fresh: bool = False) -> tuple[Profile, int]:
    """`profile` with every model's switch cost, kept while its fingerprint holds unless `fresh`;
    and 1 if measured."""
    fingerprint = fingerprint_settings(
        "switch-cost", [(model.name, model.fingerprint) for model in models], context, device_label,
        torch.get_num_threads(), fingerprint_tokens([stream]),
    )
    old = profile.switch_costs
    if not fresh and old is not None and old.fingerprint == fingerprint:
        return profile, 0
    return store_switch_costs(profile, measure_switch_costs(models, stream, context=context), context, fingerprint), 1
