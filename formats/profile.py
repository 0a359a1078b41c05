"""profile.json: what the profiler measures and the planner reads (versioned JSON).

A profile holds, for one target and its candidate drafters on one device, each model's latency
curve T_i(k) and, per ordered (verifier, drafter) pair and sampling mode, α and the tokens per
verification μ, σ. Its layout, key by key, and every check: docs/profiling.md, "The profile file".
`read_profile` raises one `PolyplanError` naming the file and the field path; a version-1 file is
migrated on read (`migrate_v1`). The profiler updates a profile measurement by measurement
(`with_model`, `with_stats`) and writes it with `write_profile` after every one.
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

_ModeKey = Annotated[str, mode_key]  # a `formats.sampling.SamplingMode` key, read in its canonical form
_MEASURED = Layout(omit=EMPTY)  # the profile leaves out what was not measured (None, empty, false)


def _unique(keys: list[Any], where: str, problem) -> None:
    seen = set()
    for index, key in enumerate(keys):
        if key in seen:
            raise Invalid(problem(key), f"{where}[{index}]")
        seen.add(key)


@dataclass(frozen=True)
class LatencyPoint:
    """Wall time of one forward pass over `k` new tokens with `context_length` tokens cached."""

    layout = _MEASURED

    context_length: int = spec(whole(0))
    k: int = spec(whole(1))
    median_s: float = spec(seconds)
    iqr_s: float = spec(non_negative, default=0.0)
    repeats: int | None = spec(whole(1), default=None)
    # the timings kept after outlier rejection, which the planner's bootstrap resamples (None: it uses median and IQR)
    samples_s: tuple[float, ...] | None = spec(non_empty("timing"), each(positive), default=None)
    outliers: int | None = spec(whole(0), default=None)  # timings dropped as outliers (profiler.stats.robust_spread)


@dataclass(frozen=True)
class PrefillPoint:
    """Wall time of processing a prompt of `context_length` tokens from an empty cache."""

    layout = _MEASURED

    context_length: int = spec(whole(1))
    median_s: float = spec(seconds)
    iqr_s: float = spec(non_negative, default=0.0)
    repeats: int | None = spec(whole(1), default=None)


@dataclass(frozen=True)
class TimingHealth:
    """The machine's state while a model's latency curve was timed (`planner.intervals.timing_health`
    reads it; the reference is the machine floor, its spread IQR / median)."""

    layout = _MEASURED

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
    latency_fingerprint: str | None = spec(text, default=None)  # of the model, latency settings and device
    timing: TimingHealth | None = None
    # an `ngram-simple` drafter's size_n: the planner replays it, not its α (`planner.exact.ngram_replay`)
    ngram_simple: int | None = spec(whole(1), default=None)


@dataclass(frozen=True)
class AlphaDistribution:
    """Spread of the per-position acceptance probability behind the mean `alpha`."""

    layout = _MEASURED

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
    """Tokens per verification at block size `k` implied by the distribution-based rates: `mu` by
    eq. 3 with i.i.d. acceptance, (1 − α^(k+1)) / (1 − α); `mu_positional` by walking the per-position
    rates α_t as decoding does, which keeps how the rate varies along a sequence."""

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
    # replayed from the teacher-forced pass (greedy, the target verifying), not decoded (absent: decoded)
    replayed: bool = False
    # the run stopped taking prompts once its interval held the mu the teacher-forced pass implied
    confirmed: bool = False


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
    fingerprint: str | None = spec(text, default=None)  # of what alpha, its distribution and `implied` came from
    warnings: tuple[str, ...] = spec(each(text), default=())
    # E[q(argmax p)]: the engines' acceptance rule (docs/profiling.md, "The profile file")
    engine_alpha: float | None = spec(probability, default=None)
    engine_alpha_ci: tuple[float, float] | None = spec(interval_in(0.0, 1.0), default=None)
    # the prompts alpha was read on when fewer than the profile's: a pair that cannot pay (absent: all of them)
    alpha_prompts: int | None = spec(whole(1), default=None)

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
    sampling: Mapping[_ModeKey, SamplingStats] = spec(factory=dict, omit=NEVER)


@dataclass(frozen=True)
class ProfilerRecord:
    """The settings the profiler measured with (`profiler.settings`, as JSON: the profiler
    owns their meaning and reads them back to resume), and the prompts it used."""

    layout = _MEASURED

    latency: Mapping[str, Any] | None = None
    acceptance: Mapping[str, Any] | None = None
    prompts: int | None = spec(whole(0), default=None)
    decoded_prompts: int | None = spec(whole(0), default=None)
    torch: str | None = spec(text, default=None)
    # the user's prompt file (absolute; None: built-in prompts) and whether it was sent raw, which
    # a later run that names no prompts resumes with
    prompt_file: str | None = spec(text, default=None)
    raw_prompts: bool = False
    # the models.yaml measured (path, contents, device), so that a plan made from the profile alone can run
    candidates: Mapping[str, Any] | None = None
    # seconds spent measuring the entries, summed over runs: what recommend's self-check is budgeted against
    seconds: float | None = spec(non_negative, default=None)


@dataclass(frozen=True)
class LoopCalibration:
    """polyplan's decoding-loop overhead measured for one sampling mode (`profiler.loop_overhead`)."""

    layout = _MEASURED

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
    """An engine's own loop overhead for one sampling mode (`engines.hf_overhead`); `details` are for people."""

    layout = _MEASURED

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

    layout = _MEASURED

    models: Mapping[str, SwitchCost] = spec(factory=dict, omit=NEVER)
    context_length: int | None = spec(whole(0), default=None)
    method: str | None = spec(text, default=None)
    # of the models, context, device, threads and token stream they were measured on (reused while it holds)
    fingerprint: str | None = spec(text, default=None)


_CONFIDENCE_STEPS = 255  # a drafter's top probability is kept to 1/255: two hex digits a position
# The candidates llama-server's draft-simple sampler keeps before the softmax its `--spec-draft-p-min`
# reads (`top_k` of `common_speculative_impl_draft_simple`, llama.cpp's common/speculative.cpp).
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
    return tuple(tuple(int(text[j:j + 2], 16) / _CONFIDENCE_STEPS for j in range(0, len(text), 2)) for text in texts)


@dataclass(frozen=True)
class PairAgreement:
    """One pair's greedy agreement along each prompt's target continuation: "1" where the
    drafter's argmax equals the verifier's, "0" where not (`profiler.agreement_runs`).
    `confidence` (pairs under the target only): the drafter's top probability at each position
    (`confidence_text`), what a p_min stop is replayed on (`planner.exact.policy_replay`);
    `confidence_top10`: the same over its `DRAFT_SIMPLE_TOP_K` largest logits, what llama-server's
    `--spec-draft-p-min` compares (`planner.llama_cpp.policy`)."""

    layout = Layout(omit=EMPTY, checks=(_confidence_per_position,))

    verifier: str = spec(text)
    drafter: str = spec(text)
    agreement: tuple[str, ...] = spec(bits, omit=NEVER)
    confidence: tuple[str, ...] = spec(hex_bytes, default=())
    confidence_top10: tuple[str, ...] = spec(hex_bytes, default=())

    def sequences(self) -> tuple[tuple[bool, ...], ...]:
        return tuple(tuple(bit == "1" for bit in text) for text in self.agreement)

    def confidences(self, top10: bool = False) -> tuple[tuple[float, ...], ...] | None:
        """The drafter's top probability at each position, per prompt, over the vocabulary or
        (`top10`) over its 10 best logits (None: not kept)."""
        return _probabilities(self.confidence_top10 if top10 else self.confidence)


def confidence_text(values) -> str:
    """Top probabilities in [0, 1] as `PairAgreement.confidence` keeps them: round(p · 255), two hex digits each."""
    return "".join(f"{min(_CONFIDENCE_STEPS, max(0, round(float(v) * _CONFIDENCE_STEPS))):02x}" for v in values)


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
    """The agreement sequences of every pair under one sampling mode (`planner.exact.runs`), the
    fingerprint of what they were measured from, and the target's greedy streams they ran on."""

    layout = _MEASURED

    pairs: tuple[PairAgreement, ...] = spec(omit=NEVER)
    fingerprint: str | None = spec(text, default=None)
    prompts: int | None = spec(whole(0), default=None)
    new_tokens: int | None = spec(whole(0), default=None)
    streams: tuple[TargetStream, ...] = ()

    def by_pair(self) -> dict[tuple[str, str], tuple[tuple[bool, ...], ...]]:
        return {(entry.verifier, entry.drafter): entry.sequences() for entry in self.pairs}

    def confidences_by_pair(self, top10: bool = False) -> dict[tuple[str, str], tuple[tuple[float, ...], ...]]:
        """`PairAgreement.confidences` of the pairs that keep them."""
        kept = {(entry.verifier, entry.drafter): entry.confidences(top10) for entry in self.pairs}
        return {pair: values for pair, values in kept.items() if values is not None}


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
    """A whole profile (its JSON layout: docs/profiling.md, "The profile file")."""

    layout = Layout(omit=EMPTY, checks=(_names_hold_together,))

    target: str = spec(text)
    device: str = spec(text)
    processor: Processor | None = None  # where its timings were taken (None: not recorded)
    models: tuple[ModelProfile, ...] = spec(omit=NEVER)
    pairs: tuple[PairProfile, ...] = spec(omit=NEVER)
    created: str | None = spec(text, default=None)
    notes: str | None = None
    meta: Mapping[str, Any] = spec(factory=dict)  # free-form: the user's, never polyplan's
    profiler: ProfilerRecord | None = None
    loop_overhead: Mapping[_ModeKey, LoopCalibration] = spec(factory=dict)
    engine_overhead: Mapping[str, Mapping[_ModeKey, EngineCalibration]] = spec(factory=dict)
    switch_costs: SwitchCosts | None = None
    acceptance_runs: Mapping[_ModeKey, AgreementRuns] = spec(factory=dict)
    source: str = local("profile")  # the path `read_profile` read, for messages; not saved

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

# version 1's keys under the profile's `meta` -> their fields (and the timing health under a model's `meta`)
_V1_META_FIELDS = {
    "profiler": "profiler", "loop_overhead": "loop_overhead", "engine_overhead": "engine_overhead",
    "switch_cost": "switch_costs", "acceptance_runs": "acceptance_runs",
}
_V1_TIMING_KEYS = tuple(field.name for field in fields(TimingHealth))


def migrate_v1(payload: dict[str, Any], label: str = "profile") -> dict[str, Any]:
    """A version-1 object as version 2 (docs/profiling.md, "The profile file"); a malformed entry is
    named where the file keeps it (``meta.loop_overhead…``). The settings and timing health the
    version-1 readers took leniently stay in `meta` when they are not valid as their record."""
    payload = {**payload, "schema_version": SCHEMA_VERSION}
    meta = payload.get("meta")
    if isinstance(meta, dict):
        meta = dict(meta)
        kinds = get_type_hints(Profile, include_extras=True)
        for old, new in _V1_META_FIELDS.items():
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
    timing = {key: meta[key] for key in _V1_TIMING_KEYS if key in meta}
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
