"""The profile: what the profiler measures and the planner reads (versioned JSON).

A profile describes one target model and its candidate drafters on one device: each model's
latency curve `T_i(k)` and, for ordered (verifier, drafter) pairs, the per-token acceptance
rate `α` and the decoded tokens per verification `μ`, `σ` at given block sizes `K`.

Format (``schema_version`` 2)
-----------------------------
One JSON object; every number must be finite (NaN and infinities are rejected), times are in
seconds and must be > 0 (and at most 1e6); unknown keys are rejected (free-form extras go under ``meta``)::

    {
      "schema_version": 2,
      "target": "vicuna-7b",                 # name of the model every chain verifies with
      "device": "cuda:0 NVIDIA H100",        # free text
      "processor": {"name": "AMD EPYC 9R14", "flags": ["avx2", …], …},   # optional: where it
                                             # was timed (formats.processor; absent in older files)
      "created": "2025-01-01T00:00:00Z",     # optional, free text
      "notes": "...",                        # optional, free text
      "meta": {...},                         # optional, free-form JSON object (yours: polyplan
                                             # never writes or reads it)
      "profiler": {"latency": {...}, "acceptance": {...},   # optional: the settings it was
                   "prompts": 16, "decoded_prompts": 8, "torch": "2.4.0"},   # measured with
      "loop_overhead": {"greedy": {"per_step_s": 1e-4, "per_round_s": 3e-4,  # optional, per
                        "vocab": 32000, "threads": 1, "method": "...",      # sampling mode
                        "fingerprint": ".."}},                              # optional
      "engine_overhead": {"hf": {"greedy": {"per_step_s": .., "per_round_s": ..,  # optional, per
                          "per_call_s": .., "fingerprint": "..", "details": {...}}}},  # engine, mode
      "switch_costs": {"models": {"eagle": [0.0002, 0.00005]},   # optional: extra seconds of
                       "context_length": 128, "method": "...",    # the 1st, 2nd, … pass after a switch
                       "fingerprint": ".."},                      # optional
      "acceptance_runs": {"greedy": {"fingerprint": "..", "prompts": 16, "new_tokens": 64,
                          "pairs": [{"verifier": "vicuna-7b", "drafter": "eagle",
                                     "agreement": ["1101…", …],   # optional: 0/1 per position
                                     "confidence": ["e6fa…", …],  # optional: the drafter's top
                                     "confidence_top10": ["f0fc…", …]}]}},  # probability over the
                                             # vocabulary, over its 10 best logits (PairAgreement)
      "models": [
        {
          "name": "vicuna-7b",               # unique; pairs refer to models by name
          "fingerprint": "sha256:1f2e...",   # non-empty; the profiler keys its cache by it
          "latency": [                       # T_i(k): >= 1 point; one per (context_length, k)
            {"context_length": 128, "k": 1, "median_s": 0.025, "iqr_s": 0.0004,
             "repeats": 20,                  # iqr_s >= 0; repeats optional (>= 1)
             "samples_s": [0.0251, …],       # optional: the kept timings (> 0), what the
             "outliers": 1}                  # planner's bootstrap resamples; outliers: timings
                                             # dropped by the profiler's rule (>= 0, optional)
          ],
          "prefill": [                       # optional: prompt processing time
            {"context_length": 128, "median_s": 0.031, "iqr_s": 0.001, "repeats": 5}
          ],
          "latency_fingerprint": "sha256:..",  # optional: model + latency settings + device
          "timing": {"reference_median_s": 0.002, "reference_relative_iqr": 0.03,  # optional:
                     "latency_outliers": 1, "latency_timings": 400,   # the machine's state while
                     "noise_budget_exhausted": false, "threads": 1,   # it was timed
                     "cpus": 2, "load_average": 0.4},                 # (planner.intervals.timing_health)
          "meta": {...}                      # optional, free-form (yours)
        }
      ],
      "pairs": [
        {
          "verifier": "vicuna-7b",           # M_i: the model that verifies
          "drafter": "eagle",                # M_j: the model whose tokens it verifies
          "sampling": {                      # one entry per sampling mode (key below)
            "greedy": {
              "alpha": 0.78,                 # per-token acceptance rate, in [0, 1)
              "alpha_samples": 4096,         # optional: tokens alpha was averaged over
              "alpha_ci": [0.75, 0.81],      # optional: confidence interval of alpha
              "engine_alpha": 0.74,          # optional: the engines' rule (see below), in [0, 1)
              "engine_alpha_ci": [0.70, 0.78],  # optional: its confidence interval
              "alpha_distribution": {        # optional: spread of the per-position rate
                "mean": 0.78, "std": 0.31, "samples": 4096,
                "quantiles": {"0.1": 0.2, "0.5": 0.93, "0.9": 1.0},
                "autocorrelation": 0.12      # optional: lag-1, in [-1, 1]
              },
              "implied": [                   # optional: mu(K) implied by the distributions
                {"k": 5, "mu": 3.6, "mu_positional": 3.9}
              ],                             # mu: i.i.d. formula from alpha; positional: the
                                             # per-position rates walked as decoding does
                                             # (both in [1, k + 1])
              "decoded": [                   # optional: measured by dualistic decoding
                {"k": 5, "mu": 4.34, "sigma": 1.2, "samples": 300,
                 "mu_ci": [4.1, 4.5], "sigma_ci": [1.0, 1.4],   # optional intervals
                 "prompts": 16, "fingerprint": "sha256:.."}     # optional
              ],                             # 1 <= mu <= k + 1; sigma, samples optional
              "fingerprint": "sha256:..",    # optional: what alpha/implied were computed from
              "warnings": ["..."]            # optional: e.g. decoded and implied mu disagree
            }
          }
        }
      ]
    }

Fingerprints (all optional, opaque non-empty strings) let the profiler reuse an entry only
when everything it was measured from is unchanged; confidence intervals are ``[low, high]``
with ``low <= high``.

``engine_alpha`` is the acceptance rate under the rule vLLM and llama.cpp use: the drafter
proposes its argmax x̂ = argmax p (p: the drafter's distribution, q: the verifier's, as in
docs/design.md) and the verifier accepts it with probability q(x̂) (vLLM's one-hot draft
distribution; llama.cpp's exact match with the verifier's sample), i.e. E[q(argmax p)] over
the same teacher-forced positions as ``alpha``. At greedy it equals ``alpha``. Profiles
written before it existed lack it; re-profiling adds it (the α entry is then re-measured).

Sampling-mode keys are `formats.sampling.SamplingMode` keys: ``"greedy"`` for temperature 0,
otherwise ``"t"`` followed by the temperature (``"t1.0"``).

Version 1 kept the profiler's loop overhead, engine overhead, switch costs, agreement runs
and settings under ``meta`` (``meta.loop_overhead``, ``meta.switch_cost``, …) and each
model's timing health in its ``meta``; `migrate_v1` reads such a file by moving those entries
to the typed fields above, so no profiling work is lost, and it is written as version 2.

The records are frozen; `formats.codec` reads and writes them from their field types, and each
field's check is named once, in its metadata (`formats.checks`); the checks that span fields
(μ within [1, k + 1], duplicates, the names a pair refers to) are each record's `layout`.
`read_profile(path)` validates everything while decoding and raises `PolyplanError` naming
the file and the field path (``profile.json: pairs[2].sampling.greedy.alpha: must be in
[0, 1), got 1.3``). The profiler builds a profile measurement by measurement (`with_model`,
`with_stats`, `dataclasses.replace`) and writes it with `write_profile` after every one;
`write_profile` validates and writes atomically.
"""


from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Annotated, Any, get_type_hints

from polyplan.formats import codec
from polyplan.formats.atomic import write_text_atomically
from polyplan.formats.checks import (
    bits, each, hex_bytes, interval_in, interval_within, mode_key, non_empty, non_negative, positive, probability, quantiles, seconds, text,
    whole, within,
)
from polyplan.formats.codec import (
    EMPTY, NEVER, FileFormat, Invalid, Layout, decode_file, encode_file, json_text, local, spec,
)
from polyplan.formats.errors import PolyplanError
from polyplan.formats.inputs import read_json_file
from polyplan.formats.overhead import LoopOverhead, SwitchCost
from polyplan.formats.processor import Processor

SCHEMA_VERSION = 2

ModeKey = Annotated[str, mode_key]  # a `formats.sampling.SamplingMode` key, read in its canonical form
MEASURED = Layout(omit=EMPTY)  # the profile leaves out what was not measured (None, empty, false)


def _unique(keys: list[Any], where: str, problem) -> None:
    seen = set()
    for index, key in enumerate(keys):
        if key in seen:
            raise Invalid(problem(key), f"{where}[{index}]")
        seen.add(key)


# --------------------------------------------------------------------------- per model


@dataclass(frozen=True)
class LatencyPoint:
    """Wall time of one forward pass over `k` new tokens with `context_length` tokens cached."""

    layout = MEASURED

    context_length: int = spec(whole(0))
    k: int = spec(whole(1))
    median_s: float = spec(seconds)
    iqr_s: float = spec(non_negative, default=0.0)
    repeats: int | None = spec(whole(1), default=None)
    # The timings kept after outlier rejection (seconds), for the planner's bootstrap; None in
    # profiles written before they were recorded (the planner then uses median and IQR).
    samples_s: tuple[float, ...] | None = spec(non_empty("timing"), each(positive), default=None)
    outliers: int | None = spec(whole(0), default=None)  # timings dropped as outliers (profiler.stats.robust_spread)


@dataclass(frozen=True)
class PrefillPoint:
    """Wall time of processing a prompt of `context_length` tokens from an empty cache."""

    layout = MEASURED

    context_length: int = spec(whole(1))
    median_s: float = spec(seconds)
    iqr_s: float = spec(non_negative, default=0.0)
    repeats: int | None = spec(whole(1), default=None)


@dataclass(frozen=True)
class TimingHealth:
    """The machine's state while a model's latency curve was timed (`planner.intervals.timing_health`
    reads it): the floor of a fixed workload measured in the same rounds (its median and
    IQR/median), the timings dropped as outliers of those taken, whether the budget for
    repeating noisy rounds ran out, the torch threads against the available cores, and the
    load average when timing began."""

    layout = MEASURED

    reference_median_s: float | None = spec(non_negative, default=None)
    reference_relative_iqr: float | None = spec(non_negative, default=None)
    latency_outliers: int | None = spec(whole(0), default=None)
    latency_timings: int | None = spec(whole(0), default=None)
    noise_budget_exhausted: bool = False
    threads: int | None = spec(whole(1), default=None)
    cpus: int | None = spec(whole(1), default=None)
    load_average: float | None = spec(non_negative, default=None)


def _one_curve(model: ModelProfile) -> None:
    if not model.latency:
        raise Invalid("must hold at least one point", ".latency")
    _unique([(p.context_length, p.k) for p in model.latency], ".latency",
            lambda key: f"duplicate point for context_length {key[0]}, k {key[1]}")


@dataclass(frozen=True)
class ModelProfile:
    """One model: its name, cache fingerprint and latency curve."""

    layout = Layout(omit=EMPTY, checks=(_one_curve,))

    name: str = spec(text)
    fingerprint: str = spec(text)
    latency: tuple[LatencyPoint, ...] = spec(default=(), omit=NEVER)
    prefill: tuple[PrefillPoint, ...] = ()
    meta: Mapping[str, Any] = spec(factory=dict)  # free-form: the user's, never polyplan's
    # Fingerprint of (model, latency settings, device) the latency and prefill were measured with.
    latency_fingerprint: str | None = spec(text, default=None)
    timing: TimingHealth | None = None
    # size_n of an `ngram-simple` drafter: it drafts only where the stream repeats itself, so the
    # planner replays it on the target's streams instead of reading its α (`planner.exact.ngram_replay`).
    ngram_simple: int | None = spec(whole(1), default=None)


# --------------------------------------------------------------------------- per pair


@dataclass(frozen=True)
class AlphaDistribution:
    """Spread of the per-position acceptance probability behind the mean `alpha`."""

    layout = MEASURED

    mean: float = spec(within(0.0, 1.0))
    std: float = spec(non_negative)
    quantiles: Mapping[str, float] = spec(quantiles, factory=dict, omit=NEVER)
    samples: int | None = spec(whole(1), default=None)
    # Lag-1 autocorrelation of the per-position rate along a sequence (0 for i.i.d. positions).
    autocorrelation: float | None = spec(within(-1.0, 1.0), default=None)


def _mu_within_k(entry: ImpliedStats | DecodedStats) -> None:
    """μ of a block of `k` lies in [1, k + 1] (and so does a decoded μ's interval)."""
    for name in ("mu", "mu_positional"):
        mu = getattr(entry, name, None)
        if mu is not None and not 1.0 <= mu <= entry.k + 1:
            raise Invalid(f"must be in [1, k + 1] = [1, {entry.k + 1}], got {mu:g}", f".{name}")
    if getattr(entry, "mu_ci", None) is not None:
        try:
            interval_within(entry.mu_ci, 1.0, entry.k + 1.0)
        except Invalid as invalid:
            raise Invalid(invalid.problem, ".mu_ci") from None


@dataclass(frozen=True)
class ImpliedStats:
    """Tokens per verification at block size `k` implied by the distribution-based rates.

    `mu` is eq. 3 with i.i.d. acceptance, (1 − α^(k+1)) / (1 − α); `mu_positional` walks the
    per-position rates α_t verification by verification as decoding does (expected tokens over
    expected verifications), so it keeps how the rate varies along a sequence (what the i.i.d.
    formula ignores).
    """

    layout = Layout(omit=EMPTY, checks=(_mu_within_k,))

    k: int = spec(whole(1))
    mu: float
    mu_positional: float | None = None


@dataclass(frozen=True)
class DecodedStats:
    """Tokens emitted per verification measured by dualistic decoding at block size `k`."""

    layout = Layout(omit=EMPTY, checks=(_mu_within_k,))

    k: int = spec(whole(1))
    mu: float
    sigma: float | None = spec(non_negative, default=None)
    samples: int | None = spec(whole(1), default=None)
    mu_ci: tuple[float, float] | None = None
    sigma_ci: tuple[float, float] | None = spec(interval_in(0.0), default=None)
    prompts: int | None = spec(whole(1), default=None)
    fingerprint: str | None = spec(text, default=None)


def _one_entry_per_k(stats: SamplingStats) -> None:
    for name in ("implied", "decoded"):
        _unique([entry.k for entry in getattr(stats, name)], f".{name}", lambda k: f"duplicate entry for k {k}")


@dataclass(frozen=True)
class SamplingStats:
    """A pair's acceptance statistics under one sampling mode."""

    layout = Layout(omit=EMPTY, checks=(_one_entry_per_k,))

    alpha: float = spec(probability)
    alpha_samples: int | None = spec(whole(1), default=None)
    alpha_distribution: AlphaDistribution | None = None
    decoded: tuple[DecodedStats, ...] = ()
    alpha_ci: tuple[float, float] | None = spec(interval_in(0.0, 1.0), default=None)
    implied: tuple[ImpliedStats, ...] = ()
    # Fingerprint of what alpha, its distribution and `implied` were computed from.
    fingerprint: str | None = spec(text, default=None)
    warnings: tuple[str, ...] = spec(each(text), default=())
    # E[q(argmax p)]: acceptance when the drafter proposes its argmax and the verifier accepts
    # with its probability of that token (vLLM, llama.cpp); None in profiles from before it.
    engine_alpha: float | None = spec(probability, default=None)
    engine_alpha_ci: tuple[float, float] | None = spec(interval_in(0.0, 1.0), default=None)

    def decoded_at(self, k: int) -> DecodedStats | None:
        """The decoded statistics measured at block size `k`, if any."""
        for stats in self.decoded:
            if stats.k == k:
                return stats
        return None


def _two_models_and_a_mode(pair: PairProfile) -> None:
    if pair.verifier == pair.drafter:
        raise Invalid(f"verifier and drafter are both {pair.verifier!r}")
    if not pair.sampling:
        raise Invalid("must be a non-empty JSON object keyed by sampling mode", ".sampling")


@dataclass(frozen=True)
class PairProfile:
    """An ordered pair: `verifier` checks the tokens `drafter` proposes."""

    layout = Layout(omit=EMPTY, checks=(_two_models_and_a_mode,))

    verifier: str = spec(text)
    drafter: str = spec(text)
    # keyed by `formats.sampling.SamplingMode` key
    sampling: Mapping[ModeKey, SamplingStats] = spec(factory=dict, omit=NEVER)


# --------------------------------------------------------------------------- whole-profile records


@dataclass(frozen=True)
class ProfilerRecord:
    """The settings the profiler measured with (`profiler.settings`, as JSON: the profiler
    owns their meaning and reads them back to resume), and the prompts it used."""

    layout = MEASURED

    latency: Mapping[str, Any] | None = None
    acceptance: Mapping[str, Any] | None = None
    prompts: int | None = spec(whole(0), default=None)
    decoded_prompts: int | None = spec(whole(0), default=None)
    torch: str | None = spec(text, default=None)
    # the user's prompt file (an absolute path; None: built-in prompts) and whether it was sent
    # raw: a later run that names no prompts resumes with these, so it re-measures nothing
    prompt_file: str | None = spec(text, default=None)
    raw_prompts: bool = False
    # the models.yaml it measured (its path, contents and device: the record a plan keeps), so that
    # `recommend --profile` alone writes a plan that `generate --plan` and `validate` can run
    candidates: Mapping[str, Any] | None = None
    # seconds the profiler spent measuring the entries (latency, acceptance, decoded runs), summed
    # over the runs that measured them: what recommend's self-check is budgeted against (None:
    # a profile from before it was recorded)
    seconds: float | None = spec(non_negative, default=None)


@dataclass(frozen=True)
class LoopCalibration:
    """polyplan's decoding-loop overhead measured for one sampling mode (`profiler.loop_overhead`)."""

    layout = MEASURED

    per_step_s: float = spec(non_negative)
    per_round_s: float = spec(non_negative)
    vocab: int | None = spec(whole(1), default=None)
    threads: int | None = spec(whole(1), default=None)
    method: str | None = spec(text, default=None)
    # of the target, vocabulary, mode, tokens, device and threads it was measured on (reused while it holds)
    fingerprint: str | None = spec(text, default=None)

    @property
    def overhead(self) -> LoopOverhead:
        return LoopOverhead(self.per_step_s, self.per_round_s)


@dataclass(frozen=True)
class EngineCalibration:
    """An engine's own loop overhead for one sampling mode (`engines.hf_overhead`):
    per step and round, per `generate` call (None in entries from before it was stored), the
    fingerprint of what it was measured on, and the measurement's details (for people)."""

    layout = MEASURED

    per_step_s: float = spec(non_negative)
    per_round_s: float = spec(non_negative)
    per_call_s: float | None = spec(non_negative, default=None)
    fingerprint: str | None = spec(text, default=None)
    details: Mapping[str, Any] = spec(factory=dict)

    @property
    def overhead(self) -> LoopOverhead:
        return LoopOverhead(self.per_step_s, self.per_round_s)


@dataclass(frozen=True)
class SwitchCosts:
    """Per model, the extra seconds of its 1st, 2nd, … pass after another model's
    (`profiler.switching`), measured at `context_length`."""

    layout = MEASURED

    models: Mapping[str, SwitchCost] = spec(factory=dict, omit=NEVER)
    context_length: int | None = spec(whole(0), default=None)
    method: str | None = spec(text, default=None)
    # of the models, context, device, threads and token stream they were measured on (reused while it holds)
    fingerprint: str | None = spec(text, default=None)


CONFIDENCE_STEPS = 255  # a drafter's top probability is kept to 1/255: two hex digits a position
# The candidates llama-server's draft-simple sampler keeps before its softmax: `top_k` 10, set in
# `common_speculative_impl_draft_simple`'s constructor (llama.cpp's common/speculative.cpp, at the
# pinned `engines.llama_cpp.build.BINDINGS_VERSION`); its `--spec-draft-p-min` reads the top
# probability renormalised over these (`planner.llama_cpp.policy`).
DRAFT_SIMPLE_TOP_K = 10


def _confidence_per_position(entry: PairAgreement) -> None:
    """One confidence per agreement position, prompt by prompt (or none kept), in each confidence field."""
    for name in ("confidence", "confidence_top10"):
        kept = getattr(entry, name)
        if kept and (len(kept) != len(entry.agreement) or any(len(c) != 2 * len(a) for c, a in zip(kept, entry.agreement))):
            raise Invalid("must give two hex digits per agreement position, for every prompt", f".{name}")


def _probabilities(texts: tuple[str, ...]) -> tuple[tuple[float, ...], ...] | None:
    """Per prompt, the probabilities `confidence_text` kept (None: none kept)."""
    if not texts:
        return None
    return tuple(tuple(int(text[j:j + 2], 16) / CONFIDENCE_STEPS for j in range(0, len(text), 2)) for text in texts)


@dataclass(frozen=True)
class PairAgreement:
    """One pair's greedy agreement along each prompt's target continuation: "1" where the
    drafter's argmax equals the verifier's, "0" where not (`profiler.agreement_runs`).

    `confidence` (pairs under the target only; empty in profiles made before it was kept): the
    drafter's top probability (softmax at temperature 1) at each of those positions, measured in
    the same teacher-forced pass, as round(p · 255) in two hex digits per position: what a
    confidence stop p_min is replayed on (`planner.exact.policy_replay`).

    `confidence_top10` (the same pairs; empty in profiles made before it was kept): the same top
    probability renormalised over the drafter's `DRAFT_SIMPLE_TOP_K` (10) largest logits (their
    softmax at temperature 1), kept the same way: what llama-server's `--spec-draft-p-min`
    compares (`planner.llama_cpp.policy`). Never below `confidence` (up to the rounding)."""

    layout = Layout(omit=EMPTY, checks=(_confidence_per_position,))

    verifier: str = spec(text)
    drafter: str = spec(text)
    agreement: tuple[str, ...] = spec(bits, omit=NEVER)
    confidence: tuple[str, ...] = spec(hex_bytes, default=())
    confidence_top10: tuple[str, ...] = spec(hex_bytes, default=())

    def sequences(self) -> tuple[tuple[bool, ...], ...]:
        return tuple(tuple(bit == "1" for bit in text) for text in self.agreement)

    def confidences(self) -> tuple[tuple[float, ...], ...] | None:
        """The drafter's top probability at each position, per prompt (None: not kept)."""
        return _probabilities(self.confidence)

    def confidences_top10(self) -> tuple[tuple[float, ...], ...] | None:
        """The drafter's top probability over its 10 best logits at each position, per prompt (None: not kept)."""
        return _probabilities(self.confidence_top10)


def confidence_text(values) -> str:
    """Top probabilities in [0, 1] as `PairAgreement.confidence` keeps them: round(p · 255), two hex digits each."""
    return "".join(f"{min(CONFIDENCE_STEPS, max(0, round(float(v) * CONFIDENCE_STEPS))):02x}" for v in values)


def _prompt_inside(stream: TargetStream) -> None:
    if stream.prompt_tokens > len(stream.ids):
        raise Invalid(f"{stream.prompt_tokens} is more than the stream's {len(stream.ids)} ids", ".prompt_tokens")


@dataclass(frozen=True)
class TargetStream:
    """One profiling prompt and the target's greedy continuation of it, as token ids: what an
    engine's own n-gram drafter looks its drafts up in (`planner.exact.ngram_replay`)."""

    layout = Layout(omit=EMPTY, checks=(_prompt_inside,))

    prompt_tokens: int = spec(whole(1))
    ids: tuple[int, ...] = spec(non_empty("token id"), each(whole(0)))


@dataclass(frozen=True)
class AgreementRuns:
    """The agreement sequences of every pair under one sampling mode (`planner.exact.runs` reads
    them), with the fingerprint of the models, prompts and settings they were measured from,
    and the target's greedy streams they were measured on (empty in profiles made before)."""

    layout = MEASURED

    pairs: tuple[PairAgreement, ...] = spec(omit=NEVER)
    fingerprint: str | None = spec(text, default=None)
    prompts: int | None = spec(whole(0), default=None)
    new_tokens: int | None = spec(whole(0), default=None)
    streams: tuple[TargetStream, ...] = ()

    def by_pair(self) -> dict[tuple[str, str], tuple[tuple[bool, ...], ...]]:
        return {(entry.verifier, entry.drafter): entry.sequences() for entry in self.pairs}

    def confidences_by_pair(self) -> dict[tuple[str, str], tuple[tuple[float, ...], ...]]:
        """The drafter's top probabilities along the agreement sequences, for the pairs that keep them."""
        kept = {(entry.verifier, entry.drafter): entry.confidences() for entry in self.pairs}
        return {pair: values for pair, values in kept.items() if values is not None}

    def top10_confidences_by_pair(self) -> dict[tuple[str, str], tuple[tuple[float, ...], ...]]:
        """The drafter's top probabilities over its 10 best logits, for the pairs that keep them."""
        kept = {(entry.verifier, entry.drafter): entry.confidences_top10() for entry in self.pairs}
        return {pair: values for pair, values in kept.items() if values is not None}


# --------------------------------------------------------------------------- the profile


def _names_hold_together(profile: Profile) -> None:
    """The target is one of the models, each named once, and every pair names two of them, once."""
    if not profile.models:
        raise Invalid("must list at least the target model", ".models")
    names: set[str] = set()
    for index, model in enumerate(profile.models):
        if model.name in names:
            raise Invalid(f"duplicate model name {model.name!r}", f".models[{index}].name")
        names.add(model.name)
    if profile.target not in names:
        raise Invalid(f"{profile.target!r} is not one of the models ({', '.join(sorted(names))})", ".target")
    for index, pair in enumerate(profile.pairs):
        for role in ("verifier", "drafter"):
            if getattr(pair, role) not in names:
                raise Invalid(f"{getattr(pair, role)!r} is not one of the models", f".pairs[{index}].{role}")
    _unique([(p.verifier, p.drafter) for p in profile.pairs], ".pairs",
            lambda key: f"duplicate pair verifier {key[0]!r}, drafter {key[1]!r}")


@dataclass(frozen=True, kw_only=True)
class Profile:
    """A whole profile (see the module docstring for the JSON format)."""

    layout = Layout(omit=EMPTY, checks=(_names_hold_together,))

    target: str = spec(text)
    device: str = spec(text)
    # The processor its timings were taken on (None in profiles from before it was recorded).
    processor: Processor | None = None
    models: tuple[ModelProfile, ...] = spec(omit=NEVER)
    pairs: tuple[PairProfile, ...] = spec(omit=NEVER)
    created: str | None = spec(text, default=None)
    notes: str | None = None
    meta: Mapping[str, Any] = spec(factory=dict)  # free-form: the user's, never polyplan's
    profiler: ProfilerRecord | None = None
    loop_overhead: Mapping[ModeKey, LoopCalibration] = spec(factory=dict)
    engine_overhead: Mapping[str, Mapping[ModeKey, EngineCalibration]] = spec(factory=dict)
    switch_costs: SwitchCosts | None = None
    acceptance_runs: Mapping[ModeKey, AgreementRuns] = spec(factory=dict)
    # Where the profile came from (the path `read_profile` read), for error messages; not saved.
    source: str = local("profile")

    def model(self, name: str) -> ModelProfile:
        """The model called `name`; `PolyplanError` if the profile has none."""
        for model in self.models:
            if model.name == name:
                return model
        raise PolyplanError(f"{self.source}: models: no model named {name!r}")

    def model_names(self) -> list[str]:
        return [model.name for model in self.models]

    def pair(self, verifier: str, drafter: str) -> PairProfile | None:
        """The (verifier, drafter) pair, or None when it was not profiled."""
        for pair in self.pairs:
            if pair.verifier == verifier and pair.drafter == drafter:
                return pair
        return None

    def stats(self, verifier: str, drafter: str, sampling: str) -> SamplingStats:
        """The pair's statistics for `sampling`; `PolyplanError` naming the pair if missing."""
        pair = self.pair(verifier, drafter)
        if pair is None or sampling not in pair.sampling:
            raise PolyplanError(
                f"{self.source}: pairs: no entry for verifier {verifier!r}, drafter {drafter!r} "
                f"under sampling {sampling!r} (a chain with {drafter!r} right below "
                f"{verifier!r} needs it)"
            )
        return pair.sampling[sampling]

    def with_model(self, model: ModelProfile) -> Profile:
        """This profile with `model` in place of the model of its name (appended when new)."""
        if model.name not in self.model_names():
            return replace(self, models=(*self.models, model))
        return replace(self, models=tuple(model if old.name == model.name else old for old in self.models))

    def with_streams(self, streams: Sequence[TargetStream]) -> Profile:
        """This profile with `streams` as the target's greedy streams (its agreement runs kept)."""
        runs = self.acceptance_runs.get("greedy") or AgreementRuns(())
        return replace(self, acceptance_runs={**self.acceptance_runs, "greedy": replace(runs, streams=tuple(streams))})

    def with_agreement(self, agreement: PairAgreement) -> Profile:
        """This profile with `agreement` as its pair's greedy agreement sequences (the pair's
        entry replaced, or appended when new)."""
        runs = self.acceptance_runs.get("greedy") or AgreementRuns(())
        pair = (agreement.verifier, agreement.drafter)
        pairs = tuple(entry for entry in runs.pairs if (entry.verifier, entry.drafter) != pair) + (agreement,)
        return replace(self, acceptance_runs={**self.acceptance_runs, "greedy": replace(runs, pairs=pairs)})

    def with_stats(self, verifier: str, drafter: str, sampling: str, stats: SamplingStats | None) -> Profile:
        """This profile with the (verifier, drafter) pair's statistics under `sampling` set to
        `stats` (None: removed); the pair is appended when new."""
        pair = self.pair(verifier, drafter) or PairProfile(verifier=verifier, drafter=drafter)
        table = dict(pair.sampling)
        if stats is None:
            table.pop(sampling, None)
        else:
            table[sampling] = stats
        updated = replace(pair, sampling=table)
        if self.pair(verifier, drafter) is None:
            return replace(self, pairs=(*self.pairs, updated))
        return replace(self, pairs=tuple(updated if old is pair else old for old in self.pairs))


# --------------------------------------------------------------------------- version 1

# Version 1 kept these under the profile's `meta` (old key -> field) and each model's timing
# health in the model's `meta`.
V1_META_FIELDS = {
    "profiler": "profiler", "loop_overhead": "loop_overhead", "engine_overhead": "engine_overhead",
    "switch_cost": "switch_costs", "acceptance_runs": "acceptance_runs",
}
V1_TIMING_KEYS = tuple(field.name for field in fields(TimingHealth))


def migrate_v1(payload: dict[str, Any], label: str = "profile") -> dict[str, Any]:
    """A version-1 object as version 2: the profiler's entries leave `meta` for their fields
    (a malformed one is named where the file keeps it, ``meta.loop_overhead…``). The settings
    and timing health the version-1 readers took leniently stay in `meta` (the user's) when
    they are not valid as their typed record."""
    payload = {**payload, "schema_version": SCHEMA_VERSION}
    meta = payload.get("meta")
    if isinstance(meta, dict):
        meta = dict(meta)
        kinds = get_type_hints(Profile, include_extras=True)
        for old, new in V1_META_FIELDS.items():
            if meta.get(old) is None:
                meta.pop(old, None)  # read as absent before
            elif new != "profiler" or _quietly_valid(ProfilerRecord, meta[old]):
                payload[new] = meta.pop(old)
                if new == "engine_overhead":
                    payload[new] = _engine_details(payload[new])
                codec.decode(kinds[new], payload[new], label, f"meta.{old}")
        payload["meta"] = meta
        if not meta:
            del payload["meta"]
    if isinstance(payload.get("models"), list):
        payload["models"] = [_migrated_model(model) for model in payload["models"]]
    return payload


def _migrated_model(model: Any) -> Any:
    if not isinstance(model, dict) or not isinstance(model.get("meta"), dict):
        return model
    meta = dict(model["meta"])
    timing = {key: meta[key] for key in V1_TIMING_KEYS if key in meta}
    if not timing or not _quietly_valid(TimingHealth, timing):
        return model  # read leniently before: values of another type were ignored, and stay the user's
    for key in timing:
        del meta[key]
    model = {**model, "timing": timing, "meta": meta}
    if not meta:
        del model["meta"]
    return model


def _quietly_valid(record: type, value: Any) -> bool:
    """Whether a version-1 record the old readers took leniently is valid as its new type."""
    try:
        codec.decode(record, value)
    except PolyplanError:
        return False
    return True


def _engine_details(table: Any) -> Any:
    """Version 1 kept an engine entry's details beside its costs; version 2 under `details`."""
    if not isinstance(table, dict) or not all(isinstance(modes, dict) for modes in table.values()):
        return table  # the decoder names what is wrong
    costs = {"per_step_s", "per_round_s", "per_call_s", "fingerprint"}
    return {
        engine: {
            mode: {**{k: v for k, v in entry.items() if k in costs}, "details": {k: v for k, v in entry.items() if k not in costs}}
            if isinstance(entry, dict) else entry
            for mode, entry in modes.items()
        }
        for engine, modes in table.items()
    }


# --------------------------------------------------------------------------- the file

PROFILE = FileFormat(kind="profile", record=Profile, version_key="schema_version", version=SCHEMA_VERSION,
                     migrations={1: migrate_v1}, advice="re-run the profiler or upgrade polyplan")


def encode_profile(profile: Profile) -> dict[str, Any]:
    """The profile.json object of `profile` (what was not measured left out)."""
    return encode_file(PROFILE, profile)


def decode_profile(payload: Any, label: str = "profile") -> Profile:
    """The `Profile` of a parsed profile.json object (errors name `label` and the field); a
    version-1 object is migrated."""
    return replace(decode_file(PROFILE, payload, label), source=label)


def read_profile(path: str | os.PathLike[str]) -> Profile:
    """Read and validate a profile; any problem raises `PolyplanError` naming file and field."""
    return decode_profile(read_json_file(path, "file"), str(path))


def write_profile(profile: Profile, path: str | os.PathLike[str]) -> None:
    """Validate, then write atomically (temporary file in the same folder + os.replace)."""
    payload = encode_profile(profile)
    decode_profile(payload, str(path))
    write_text_atomically(path, json_text(payload))
