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
                                     "agreement": ["1101…", …]}]}},   # optional: 0/1 per position
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
model's timing health in its ``meta``; `formats.profile_codec` reads such a file by moving
those entries to the typed fields above, so no profiling work is lost, and writes version 2.

This module holds the types; `formats.profile_codec` is their one JSON codec: `load(path)`
validates everything while decoding and raises `PolyplanError` naming the file and the field
path (``profile.json: pairs[2].sampling.greedy.alpha: must be in [0, 1), got 1.3``). The
measurement entries are mutable so that the profiler can build a profile field by field and
call `Profile.save(path)` after every measurement; `save` validates and writes atomically.
The records one stage writes whole and another reads (overheads, runs, timing health,
settings) are frozen. Each field's JSON check is named once, in its metadata (`json`), and
read by the codec.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from polyplan.formats.errors import PolyplanError
from polyplan.formats.overhead import LoopOverhead, SwitchCost
from polyplan.formats.processor import Processor

SCHEMA_VERSION = 2


def spec(check: str, *, default: Any = ..., factory: Any = None, of: type | None = None, always: bool = False) -> Any:
    """A dataclass field with its JSON check (a `formats.profile_codec` checker name), the type
    of its records (`of`, for lists and maps of them), and whether it is written even empty."""
    metadata = {"json": check, "of": of, "always": always}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    if default is ...:
        return field(metadata=metadata)
    return field(default=default, metadata=metadata)


# --------------------------------------------------------------------------- per model


@dataclass
class LatencyPoint:
    """Wall time of one forward pass over `k` new tokens with `context_length` tokens cached."""

    context_length: int = spec("count0")
    k: int = spec("count1")
    median_s: float = spec("seconds")
    iqr_s: float = spec("non_negative", default=0.0)
    repeats: int | None = spec("count1", default=None)
    # The timings kept after outlier rejection (seconds), for the planner's bootstrap; None in
    # profiles written before they were recorded (the planner then uses median and IQR).
    samples_s: tuple[float, ...] | None = spec("timings", default=None)
    outliers: int | None = spec("count0", default=None)  # timings dropped as outliers (profiler.stats.robust_spread)


@dataclass
class PrefillPoint:
    """Wall time of processing a prompt of `context_length` tokens from an empty cache."""

    context_length: int = spec("count1")
    median_s: float = spec("seconds")
    iqr_s: float = spec("non_negative", default=0.0)
    repeats: int | None = spec("count1", default=None)


@dataclass(frozen=True)
class TimingHealth:
    """The machine's state while a model's latency curve was timed (`planner.intervals.timing_health`
    reads it): the floor of a fixed workload measured in the same rounds (its median and
    IQR/median), the timings dropped as outliers of those taken, whether the budget for
    repeating noisy rounds ran out, the torch threads against the available cores, and the
    load average when timing began."""

    reference_median_s: float | None = spec("non_negative", default=None)
    reference_relative_iqr: float | None = spec("non_negative", default=None)
    latency_outliers: int | None = spec("count0", default=None)
    latency_timings: int | None = spec("count0", default=None)
    noise_budget_exhausted: bool = spec("flag", default=False)
    threads: int | None = spec("count1", default=None)
    cpus: int | None = spec("count1", default=None)
    load_average: float | None = spec("non_negative", default=None)


@dataclass
class ModelProfile:
    """One model: its name, cache fingerprint and latency curve."""

    name: str = spec("text")
    fingerprint: str = spec("text")
    latency: list[LatencyPoint] = spec("records", factory=list, of=LatencyPoint, always=True)
    prefill: list[PrefillPoint] = spec("records", factory=list, of=PrefillPoint)
    meta: dict[str, Any] = spec("free", factory=dict)  # free-form: the user's, never polyplan's
    # Fingerprint of (model, latency settings, device) the latency and prefill were measured with.
    latency_fingerprint: str | None = spec("text", default=None)
    timing: TimingHealth | None = spec("record", default=None, of=TimingHealth)
    # size_n of an `ngram-simple` drafter: it drafts only where the stream repeats itself, so the
    # planner replays it on the target's streams instead of reading its α (`planner.exact.ngram_replay`).
    ngram_simple: int | None = spec("count1", default=None)


# --------------------------------------------------------------------------- per pair


@dataclass
class AlphaDistribution:
    """Spread of the per-position acceptance probability behind the mean `alpha`."""

    mean: float = spec("unit")
    std: float = spec("non_negative")
    quantiles: dict[str, float] = spec("quantiles", factory=dict, always=True)
    samples: int | None = spec("count1", default=None)
    # Lag-1 autocorrelation of the per-position rate along a sequence (0 for i.i.d. positions).
    autocorrelation: float | None = spec("correlation", default=None)


@dataclass
class ImpliedStats:
    """Tokens per verification at block size `k` implied by the distribution-based rates.

    `mu` is eq. 3 with i.i.d. acceptance, (1 − α^(k+1)) / (1 − α); `mu_positional` walks the
    per-position rates α_t verification by verification as decoding does (expected tokens over
    expected verifications), so it keeps how the rate varies along a sequence (what the i.i.d.
    formula ignores).
    """

    k: int = spec("count1")
    mu: float = spec("mu")
    mu_positional: float | None = spec("mu", default=None)


@dataclass
class DecodedStats:
    """Tokens emitted per verification measured by dualistic decoding at block size `k`."""

    k: int = spec("count1")
    mu: float = spec("mu")
    sigma: float | None = spec("non_negative", default=None)
    samples: int | None = spec("count1", default=None)
    mu_ci: tuple[float, float] | None = spec("mu_interval", default=None)
    sigma_ci: tuple[float, float] | None = spec("non_negative_interval", default=None)
    prompts: int | None = spec("count1", default=None)
    fingerprint: str | None = spec("text", default=None)


@dataclass
class SamplingStats:
    """A pair's acceptance statistics under one sampling mode."""

    alpha: float = spec("probability")
    alpha_samples: int | None = spec("count1", default=None)
    alpha_distribution: AlphaDistribution | None = spec("record", default=None, of=AlphaDistribution)
    decoded: list[DecodedStats] = spec("records", factory=list, of=DecodedStats)
    alpha_ci: tuple[float, float] | None = spec("unit_interval", default=None)
    implied: list[ImpliedStats] = spec("records", factory=list, of=ImpliedStats)
    # Fingerprint of what alpha, its distribution and `implied` were computed from.
    fingerprint: str | None = spec("text", default=None)
    warnings: list[str] = spec("texts", factory=list)
    # E[q(argmax p)]: acceptance when the drafter proposes its argmax and the verifier accepts
    # with its probability of that token (vLLM, llama.cpp); None in profiles from before it.
    engine_alpha: float | None = spec("probability", default=None)
    engine_alpha_ci: tuple[float, float] | None = spec("unit_interval", default=None)

    def decoded_at(self, k: int) -> DecodedStats | None:
        """The decoded statistics measured at block size `k`, if any."""
        for stats in self.decoded:
            if stats.k == k:
                return stats
        return None


@dataclass
class PairProfile:
    """An ordered pair: `verifier` checks the tokens `drafter` proposes."""

    verifier: str = spec("text")
    drafter: str = spec("text")
    # keyed by `formats.sampling.SamplingMode` key
    sampling: dict[str, SamplingStats] = spec("modes", factory=dict, of=SamplingStats, always=True)


# --------------------------------------------------------------------------- whole-profile records


@dataclass(frozen=True)
class ProfilerRecord:
    """The settings the profiler measured with (`profiler.settings`, as JSON: the profiler
    owns their meaning and reads them back to resume), and the prompts it used."""

    latency: Mapping[str, Any] | None = spec("free", default=None)
    acceptance: Mapping[str, Any] | None = spec("free", default=None)
    prompts: int | None = spec("count0", default=None)
    decoded_prompts: int | None = spec("count0", default=None)
    torch: str | None = spec("text", default=None)
    # the user's prompt file (an absolute path; None: built-in prompts) and whether it was sent
    # raw: a later run that names no prompts resumes with these, so it re-measures nothing
    prompt_file: str | None = spec("text", default=None)
    raw_prompts: bool = spec("flag", default=False)
    # the models.yaml it measured (its path, contents and device: the record a plan keeps), so that
    # `recommend --profile` alone writes a plan that `generate --plan` and `validate` can run
    candidates: Mapping[str, Any] | None = spec("free", default=None)


@dataclass(frozen=True)
class LoopCalibration:
    """polyplan's decoding-loop overhead measured for one sampling mode (`profiler.loop_overhead`)."""

    per_step_s: float = spec("non_negative")
    per_round_s: float = spec("non_negative")
    vocab: int | None = spec("count1", default=None)
    threads: int | None = spec("count1", default=None)
    method: str | None = spec("text", default=None)
    # of the target, vocabulary, mode, tokens, device and threads it was measured on (reused while it holds)
    fingerprint: str | None = spec("text", default=None)

    @property
    def overhead(self) -> LoopOverhead:
        return LoopOverhead(self.per_step_s, self.per_round_s)


@dataclass(frozen=True)
class EngineCalibration:
    """An engine's own loop overhead for one sampling mode (`engines.hf_overhead`):
    per step and round, per `generate` call (None in entries from before it was stored), the
    fingerprint of what it was measured on, and the measurement's details (for people)."""

    per_step_s: float = spec("non_negative")
    per_round_s: float = spec("non_negative")
    per_call_s: float | None = spec("non_negative", default=None)
    fingerprint: str | None = spec("text", default=None)
    details: Mapping[str, Any] = spec("free", factory=dict)

    @property
    def overhead(self) -> LoopOverhead:
        return LoopOverhead(self.per_step_s, self.per_round_s)


@dataclass(frozen=True)
class SwitchCosts:
    """Per model, the extra seconds of its 1st, 2nd, … pass after another model's
    (`profiler.switching`), measured at `context_length`."""

    models: Mapping[str, SwitchCost] = spec("switch_table", factory=dict, always=True)
    context_length: int | None = spec("count0", default=None)
    method: str | None = spec("text", default=None)
    # of the models, context, device, threads and token stream they were measured on (reused while it holds)
    fingerprint: str | None = spec("text", default=None)


@dataclass(frozen=True)
class PairAgreement:
    """One pair's greedy agreement along each prompt's target continuation: "1" where the
    drafter's argmax equals the verifier's, "0" where not (`profiler.agreement_runs`)."""

    verifier: str = spec("text")
    drafter: str = spec("text")
    agreement: tuple[str, ...] = spec("bits", always=True)

    def sequences(self) -> tuple[tuple[bool, ...], ...]:
        return tuple(tuple(bit == "1" for bit in text) for text in self.agreement)


@dataclass(frozen=True)
class TargetStream:
    """One profiling prompt and the target's greedy continuation of it, as token ids: what an
    engine's own n-gram drafter looks its drafts up in (`planner.exact.ngram_replay`)."""

    prompt_tokens: int = spec("count1")
    ids: tuple[int, ...] = spec("token_ids")


@dataclass(frozen=True)
class AgreementRuns:
    """The agreement sequences of every pair under one sampling mode (`planner.exact.runs` reads
    them), with the fingerprint of the models, prompts and settings they were measured from,
    and the target's greedy streams they were measured on (empty in profiles made before)."""

    pairs: tuple[PairAgreement, ...] = spec("records", of=PairAgreement, always=True)
    fingerprint: str | None = spec("text", default=None)
    prompts: int | None = spec("count0", default=None)
    new_tokens: int | None = spec("count0", default=None)
    streams: tuple[TargetStream, ...] = spec("records", default=(), of=TargetStream)

    def by_pair(self) -> dict[tuple[str, str], tuple[tuple[bool, ...], ...]]:
        return {(entry.verifier, entry.drafter): entry.sequences() for entry in self.pairs}


# --------------------------------------------------------------------------- the profile


@dataclass
class Profile:
    """A whole profile (see the module docstring for the JSON format)."""

    target: str = spec("text")
    device: str = spec("text")
    # The processor its timings were taken on (None in profiles from before it was recorded).
    processor: Processor | None = spec("processor", default=None)
    models: list[ModelProfile] = spec("records", factory=list, of=ModelProfile, always=True)
    pairs: list[PairProfile] = spec("records", factory=list, of=PairProfile, always=True)
    schema_version: int = spec("version", default=SCHEMA_VERSION)
    created: str | None = spec("text", default=None)
    notes: str | None = spec("string", default=None)
    meta: dict[str, Any] = spec("free", factory=dict)  # free-form: the user's, never polyplan's
    profiler: ProfilerRecord | None = spec("record", default=None, of=ProfilerRecord)
    loop_overhead: dict[str, LoopCalibration] = spec("modes", factory=dict, of=LoopCalibration)
    engine_overhead: dict[str, dict[str, EngineCalibration]] = spec("engines", factory=dict, of=EngineCalibration)
    switch_costs: SwitchCosts | None = spec("record", default=None, of=SwitchCosts)
    acceptance_runs: dict[str, AgreementRuns] = spec("modes", factory=dict, of=AgreementRuns)
    # Where the profile came from (the path `load` read), for error messages; not saved.
    source: str = field(default="profile", compare=False, repr=False)

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

    def add_pair(self, verifier: str, drafter: str) -> PairProfile:
        """The (verifier, drafter) pair, created empty if absent (for incremental writing)."""
        pair = self.pair(verifier, drafter)
        if pair is None:
            pair = PairProfile(verifier=verifier, drafter=drafter)
            self.pairs.append(pair)
        return pair

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON object of this profile (optional fields left out when unset)."""
        from polyplan.formats.profile_codec import encode

        return encode(self)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Validate, then write atomically (temporary file in the same folder + os.replace)."""
        from polyplan.formats.profile_codec import save

        save(self, path)

