"""The profile: what the profiler measures and the planner reads (versioned JSON).

A profile describes one target model and its candidate drafters on one device: each model's
latency curve `T_i(k)` and, for ordered (verifier, drafter) pairs, the per-token acceptance
rate `α` and the decoded tokens per verification `μ`, `σ` at given block sizes `K`.

Format (``schema_version`` 1)
-----------------------------
One JSON object; every number must be finite (NaN and infinities are rejected), times are in
seconds and must be > 0 (and at most 1e6); unknown keys are rejected (free-form extras go under ``meta``)::

    {
      "schema_version": 1,
      "target": "vicuna-7b",                 # name of the model every chain verifies with
      "device": "cuda:0 NVIDIA H100",        # free text
      "created": "2025-01-01T00:00:00Z",     # optional, free text
      "notes": "...",                        # optional, free text
      "meta": {...},                         # optional, free-form JSON object
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
          "meta": {...}                      # optional
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
DESIGN.md) and the verifier accepts it with probability q(x̂) (vLLM's one-hot draft
distribution; llama.cpp's exact match with the verifier's sample), i.e. E[q(argmax p)] over
the same teacher-forced positions as ``alpha``. At greedy it equals ``alpha``. Profiles
written before it existed lack it; re-profiling adds it (the α entry is then re-measured).

Sampling-mode keys: ``"greedy"`` for temperature 0 (argmax at every level; α is then the
argmax agreement rate), otherwise ``"t"`` followed by the temperature as Python writes the
float (``sampling_key(1.0) == "t1.0"``, ``sampling_key(0.7) == "t0.7"``). The planner treats
keys as opaque strings and looks them up exactly.

`load(path)` validates everything and raises `PolyplanError` naming the file and the field
path (``profile.json: pairs[2].sampling.greedy.alpha: must be in [0, 1), got 1.3``).
The dataclasses are mutable so that the profiler can build a profile field by field and call
`Profile.save(path)` after every measurement; `save` validates and writes atomically.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyplan.formats.atomic import write_text_atomically
from polyplan.formats.errors import PolyplanError

SCHEMA_VERSION = 1
MAX_INTEGER = 2**53  # integers beyond it lose precision as floats (and 10^400 overflows one)
MAX_SECONDS = 1e6  # bound on a timed pass: larger values overflow the planner's sums to inf


def sampling_key(temperature: float) -> str:
    """The profile key of a sampling mode: ``"greedy"`` at temperature 0, else ``"t<T>"``."""
    if not math.isfinite(temperature) or temperature < 0:
        raise PolyplanError(f"temperature: must be a finite number >= 0, got {temperature!r}")
    if temperature == 0:
        return "greedy"
    return f"t{float(temperature)}"


def sampling_temperature(key: str) -> float:
    """The temperature of a sampling-mode key (`sampling_key` reversed): 0 for ``"greedy"``,
    T for ``"t<T>"``; a `PolyplanError` for anything else."""
    if key == "greedy":
        return 0.0
    try:
        if key.startswith("t"):
            return float(key[1:])
    except ValueError:
        pass
    raise PolyplanError(f"sampling key {key!r} is neither 'greedy' nor 't<temperature>' (e.g. 't1.0')")


# --------------------------------------------------------------------------- dataclasses


@dataclass
class LatencyPoint:
    """Wall time of one forward pass over `k` new tokens with `context_length` tokens cached."""

    context_length: int
    k: int
    median_s: float
    iqr_s: float = 0.0
    repeats: int | None = None
    # The timings kept after outlier rejection (seconds), for the planner's bootstrap; None in
    # profiles written before they were recorded (the planner then uses median and IQR).
    samples_s: tuple[float, ...] | None = None
    outliers: int | None = None  # timings dropped as outliers (profiler.stats.robust_spread)


@dataclass
class PrefillPoint:
    """Wall time of processing a prompt of `context_length` tokens from an empty cache."""

    context_length: int
    median_s: float
    iqr_s: float = 0.0
    repeats: int | None = None


@dataclass
class ModelProfile:
    """One model: its name, cache fingerprint and latency curve."""

    name: str
    fingerprint: str
    latency: list[LatencyPoint] = field(default_factory=list)
    prefill: list[PrefillPoint] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    # Fingerprint of (model, latency settings, device) the latency and prefill were measured with.
    latency_fingerprint: str | None = None


@dataclass
class AlphaDistribution:
    """Spread of the per-position acceptance probability behind the mean `alpha`."""

    mean: float
    std: float
    quantiles: dict[str, float] = field(default_factory=dict)
    samples: int | None = None
    # Lag-1 autocorrelation of the per-position rate along a sequence (0 for i.i.d. positions).
    autocorrelation: float | None = None


@dataclass
class ImpliedStats:
    """Tokens per verification at block size `k` implied by the distribution-based rates.

    `mu` is eq. 3 with i.i.d. acceptance, (1 − α^(k+1)) / (1 − α); `mu_positional` walks the
    per-position rates α_t verification by verification as decoding does (expected tokens over
    expected verifications), so it keeps how the rate varies along a sequence (what the i.i.d.
    formula ignores).
    """

    k: int
    mu: float
    mu_positional: float | None = None


@dataclass
class DecodedStats:
    """Tokens emitted per verification measured by dualistic decoding at block size `k`."""

    k: int
    mu: float
    sigma: float | None = None
    samples: int | None = None
    mu_ci: tuple[float, float] | None = None
    sigma_ci: tuple[float, float] | None = None
    prompts: int | None = None
    fingerprint: str | None = None


@dataclass
class SamplingStats:
    """A pair's acceptance statistics under one sampling mode."""

    alpha: float
    alpha_samples: int | None = None
    alpha_distribution: AlphaDistribution | None = None
    decoded: list[DecodedStats] = field(default_factory=list)
    alpha_ci: tuple[float, float] | None = None
    implied: list[ImpliedStats] = field(default_factory=list)
    # Fingerprint of what alpha, its distribution and `implied` were computed from.
    fingerprint: str | None = None
    warnings: list[str] = field(default_factory=list)
    # E[q(argmax p)]: acceptance when the drafter proposes its argmax and the verifier accepts
    # with its probability of that token (vLLM, llama.cpp); None in profiles from before it.
    engine_alpha: float | None = None
    engine_alpha_ci: tuple[float, float] | None = None

    def decoded_at(self, k: int) -> DecodedStats | None:
        """The decoded statistics measured at block size `k`, if any."""
        for stats in self.decoded:
            if stats.k == k:
                return stats
        return None


@dataclass
class PairProfile:
    """An ordered pair: `verifier` checks the tokens `drafter` proposes."""

    verifier: str
    drafter: str
    sampling: dict[str, SamplingStats] = field(default_factory=dict)


@dataclass
class Profile:
    """A whole profile (see the module docstring for the JSON format)."""

    target: str
    device: str
    models: list[ModelProfile] = field(default_factory=list)
    pairs: list[PairProfile] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
    created: str | None = None
    notes: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
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
        return _profile_to_dict(self)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Validate, then write atomically (temporary file in the same folder + os.replace)."""
        path = Path(path)
        payload = self.to_json_dict()
        _Validator(str(path)).profile(payload)
        write_text_atomically(path, json.dumps(payload, indent=2, allow_nan=False) + "\n")


# --------------------------------------------------------------------------- load


def load(path: str | os.PathLike[str]) -> Profile:
    """Read and validate a profile; any problem raises `PolyplanError` naming file and field."""
    from polyplan.formats.inputs import read_json_file

    label = str(path)
    payload = read_json_file(path, "file")
    return from_json_dict(payload, label=label)


def from_json_dict(payload: Any, *, label: str = "profile") -> Profile:
    """Validate a parsed JSON object and build the `Profile` (errors are prefixed `label`)."""
    _Validator(label).profile(payload)
    profile = _profile_from_dict(payload)
    profile.source = label
    return profile


# --------------------------------------------------------------------------- validation

_PROFILE_KEYS = {"schema_version", "target", "device", "created", "notes", "meta", "models", "pairs"}
_MODEL_KEYS = {"name", "fingerprint", "latency", "prefill", "meta", "latency_fingerprint"}
_LATENCY_KEYS = {"context_length", "k", "median_s", "iqr_s", "repeats", "samples_s", "outliers"}
_PREFILL_KEYS = {"context_length", "median_s", "iqr_s", "repeats"}
_PAIR_KEYS = {"verifier", "drafter", "sampling"}
_SAMPLING_KEYS = {
    "alpha", "alpha_samples", "alpha_distribution", "decoded", "alpha_ci", "implied", "fingerprint", "warnings",
    "engine_alpha", "engine_alpha_ci",
}
_DISTRIBUTION_KEYS = {"mean", "std", "quantiles", "samples", "autocorrelation"}
_IMPLIED_KEYS = {"k", "mu", "mu_positional"}
_DECODED_KEYS = {"k", "mu", "sigma", "samples", "mu_ci", "sigma_ci", "prompts", "fingerprint"}


class _Validator:
    """Checks a parsed profile; each failure is one line `label: field.path: problem`."""

    def __init__(self, label: str) -> None:
        self.label = label

    def fail(self, where: str, problem: str) -> None:
        raise PolyplanError(f"{self.label}: {where}: {problem}" if where else f"{self.label}: {problem}")

    # ---- primitives
    def obj(self, value: Any, where: str, allowed: set[str], required: set[str]) -> dict:
        if not isinstance(value, dict):
            self.fail(where, f"must be a JSON object, got {_kind(value)}")
        for key in value:
            if key not in allowed:
                self.fail(where, f"unknown field {key!r} (allowed: {', '.join(sorted(allowed))})")
        for key in sorted(required):
            if key not in value:
                self.fail(_join(where, key), "missing")
        return value

    def number(self, value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(where, f"must be a number, got {_kind(value)}")
        if isinstance(value, int) and abs(value) > MAX_INTEGER:
            self.fail(where, f"must be a finite number, got an integer of {len(str(abs(value)))} digits")
        if not math.isfinite(value):
            self.fail(where, f"must be a finite number, got {value!r}".replace("nan", "NaN"))
        return float(value)

    def positive(self, value: Any, where: str) -> float:
        number = self.number(value, where)
        if number <= 0:
            self.fail(where, f"must be > 0, got {number:g}")
        return number

    def seconds(self, value: Any, where: str) -> float:
        number = self.positive(value, where)
        if number > MAX_SECONDS:
            self.fail(where, f"must be at most {MAX_SECONDS:g} s (a forward pass of days is not a timing), got {number:g}")
        return number

    def non_negative(self, value: Any, where: str) -> float:
        number = self.number(value, where)
        if number < 0:
            self.fail(where, f"must be >= 0, got {number:g}")
        return number

    def integer(self, value: Any, where: str, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and math.isfinite(value) and value.is_integer():
                value = int(value)
            else:
                self.fail(where, f"must be an integer >= {minimum}, got {_show(value)}")
        if value < minimum:
            self.fail(where, f"must be an integer >= {minimum}, got {value}")
        if value > MAX_INTEGER:
            self.fail(where, f"must be an integer <= {MAX_INTEGER} (2^53), got an integer of {len(str(value))} digits")
        return value

    def text(self, value: Any, where: str, *, optional: bool = False) -> None:
        if optional and value is None:
            return
        if not isinstance(value, str) or not value.strip():
            self.fail(where, f"must be a non-empty string, got {_show(value)}")

    def probability(self, value: Any, where: str) -> float:
        number = self.number(value, where)
        if not 0.0 <= number < 1.0:
            self.fail(where, f"must be in [0, 1), got {number:g}")
        return number

    def interval(self, value: Any, where: str, low: float | None = None, high: float | None = None) -> None:
        """A confidence interval `[low, high]` of finite numbers, optionally within bounds."""
        if not isinstance(value, list) or len(value) != 2:
            self.fail(where, f"must be a [low, high] array of two numbers, got {_show(value)}")
        lo, hi = self.number(value[0], f"{where}[0]"), self.number(value[1], f"{where}[1]")
        if lo > hi:
            self.fail(where, f"low {lo:g} is above high {hi:g}")
        if (low is not None and lo < low) or (high is not None and hi > high):
            bounds = f"[{'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'}]"
            self.fail(where, f"must lie within {bounds}, got [{lo:g}, {hi:g}]")

    def array(self, value: Any, where: str) -> list:
        if not isinstance(value, list):
            self.fail(where, f"must be a JSON array, got {_kind(value)}")
        return value

    def meta(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            self.fail(where, f"must be a JSON object, got {_kind(value)}")
        self.finite_everywhere(value, where)

    def finite_everywhere(self, value: Any, where: str) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(where, f"must be a finite number, got {value!r}".replace("nan", "NaN"))
        if isinstance(value, dict):
            for key, item in value.items():
                self.finite_everywhere(item, _join(where, str(key)))
        if isinstance(value, list):
            for index, item in enumerate(value):
                self.finite_everywhere(item, f"{where}[{index}]")

    # ---- structure
    def profile(self, payload: Any) -> None:
        if not isinstance(payload, dict):
            self.fail("", f"must hold one JSON object, got {_kind(payload)}")
        version = payload.get("schema_version")
        if version != SCHEMA_VERSION or isinstance(version, bool):
            self.fail(
                "schema_version",
                f"unsupported version {_show(version)}; this polyplan reads version "
                f"{SCHEMA_VERSION} (re-run the profiler or upgrade polyplan)",
            )
        self.obj(payload, "", _PROFILE_KEYS, {"schema_version", "target", "device", "models", "pairs"})
        self.text(payload["target"], "target")
        self.text(payload["device"], "device")
        self.text(payload.get("created"), "created", optional=True)
        if payload.get("notes") is not None and not isinstance(payload["notes"], str):
            self.fail("notes", f"must be a string, got {_kind(payload['notes'])}")
        if "meta" in payload:
            self.meta(payload["meta"], "meta")
        models = self.array(payload["models"], "models")
        if not models:
            self.fail("models", "must list at least the target model")
        names: set[str] = set()
        for index, model in enumerate(models):
            where = f"models[{index}]"
            self.model(model, where)
            if model["name"] in names:
                self.fail(f"{where}.name", f"duplicate model name {model['name']!r}")
            names.add(model["name"])
        if payload["target"] not in names:
            self.fail("target", f"{payload['target']!r} is not one of the models ({', '.join(sorted(names))})")
        seen: set[tuple[str, str]] = set()
        for index, pair in enumerate(self.array(payload["pairs"], "pairs")):
            where = f"pairs[{index}]"
            self.pair(pair, where, names)
            key = (pair["verifier"], pair["drafter"])
            if key in seen:
                self.fail(where, f"duplicate pair verifier {key[0]!r}, drafter {key[1]!r}")
            seen.add(key)

    def model(self, model: Any, where: str) -> None:
        self.obj(model, where, _MODEL_KEYS, {"name", "fingerprint", "latency"})
        self.text(model["name"], f"{where}.name")
        self.text(model["fingerprint"], f"{where}.fingerprint")
        latency = self.array(model["latency"], f"{where}.latency")
        if not latency:
            self.fail(f"{where}.latency", "must hold at least one point")
        seen: set[tuple[int, int]] = set()
        for index, point in enumerate(latency):
            at = f"{where}.latency[{index}]"
            self.obj(point, at, _LATENCY_KEYS, {"context_length", "k", "median_s"})
            context = self.integer(point["context_length"], f"{at}.context_length", 0)
            k = self.integer(point["k"], f"{at}.k", 1)
            self.seconds(point["median_s"], f"{at}.median_s")
            if "iqr_s" in point:
                self.non_negative(point["iqr_s"], f"{at}.iqr_s")
            if point.get("repeats") is not None:
                self.integer(point["repeats"], f"{at}.repeats", 1)
            if point.get("samples_s") is not None:
                samples = self.array(point["samples_s"], f"{at}.samples_s")
                if not samples:
                    self.fail(f"{at}.samples_s", "must hold at least one timing")
                for index_s, value in enumerate(samples):
                    self.positive(value, f"{at}.samples_s[{index_s}]")
            if point.get("outliers") is not None:
                self.integer(point["outliers"], f"{at}.outliers", 0)
            if (context, k) in seen:
                self.fail(at, f"duplicate point for context_length {context}, k {k}")
            seen.add((context, k))
        for index, point in enumerate(self.array(model.get("prefill", []), f"{where}.prefill")):
            at = f"{where}.prefill[{index}]"
            self.obj(point, at, _PREFILL_KEYS, {"context_length", "median_s"})
            self.integer(point["context_length"], f"{at}.context_length", 1)
            self.seconds(point["median_s"], f"{at}.median_s")
            if "iqr_s" in point:
                self.non_negative(point["iqr_s"], f"{at}.iqr_s")
            if point.get("repeats") is not None:
                self.integer(point["repeats"], f"{at}.repeats", 1)
        if model.get("latency_fingerprint") is not None:
            self.text(model["latency_fingerprint"], f"{where}.latency_fingerprint")
        if "meta" in model:
            self.meta(model["meta"], f"{where}.meta")

    def pair(self, pair: Any, where: str, names: set[str]) -> None:
        self.obj(pair, where, _PAIR_KEYS, {"verifier", "drafter", "sampling"})
        for role in ("verifier", "drafter"):
            self.text(pair[role], f"{where}.{role}")
            if pair[role] not in names:
                self.fail(f"{where}.{role}", f"{pair[role]!r} is not one of the models")
        if pair["verifier"] == pair["drafter"]:
            self.fail(where, f"verifier and drafter are both {pair['verifier']!r}")
        sampling = pair["sampling"]
        if not isinstance(sampling, dict) or not sampling:
            self.fail(f"{where}.sampling", "must be a non-empty JSON object keyed by sampling mode")
        for mode, stats in sampling.items():
            if mode != "greedy" and not _is_temperature_key(mode):
                self.fail(f"{where}.sampling", f"key {mode!r} is neither 'greedy' nor 't<temperature>' (e.g. 't1.0')")
            self.sampling(stats, f"{where}.sampling.{mode}")

    def sampling(self, stats: Any, where: str) -> None:
        self.obj(stats, where, _SAMPLING_KEYS, {"alpha"})
        self.probability(stats["alpha"], f"{where}.alpha")
        if stats.get("alpha_samples") is not None:
            self.integer(stats["alpha_samples"], f"{where}.alpha_samples", 1)
        if stats.get("alpha_distribution") is not None:
            at = f"{where}.alpha_distribution"
            spread = self.obj(stats["alpha_distribution"], at, _DISTRIBUTION_KEYS, {"mean", "std"})
            mean = self.number(spread["mean"], f"{at}.mean")
            if not 0.0 <= mean <= 1.0:
                self.fail(f"{at}.mean", f"must be in [0, 1], got {mean:g}")
            self.non_negative(spread["std"], f"{at}.std")
            if spread.get("samples") is not None:
                self.integer(spread["samples"], f"{at}.samples", 1)
            quantiles = spread.get("quantiles", {})
            if not isinstance(quantiles, dict):
                self.fail(f"{at}.quantiles", f"must be a JSON object, got {_kind(quantiles)}")
            for level, value in quantiles.items():
                try:
                    probability = float(level)
                except ValueError:
                    probability = math.nan
                if not 0.0 <= probability <= 1.0:
                    self.fail(f"{at}.quantiles", f"key {level!r} is not a probability in [0, 1]")
                quantile = self.number(value, f"{at}.quantiles.{level}")
                if not 0.0 <= quantile <= 1.0:
                    self.fail(f"{at}.quantiles.{level}", f"must be in [0, 1], got {quantile:g}")
            if spread.get("autocorrelation") is not None:
                correlation = self.number(spread["autocorrelation"], f"{at}.autocorrelation")
                if not -1.0 <= correlation <= 1.0:
                    self.fail(f"{at}.autocorrelation", f"must be in [-1, 1], got {correlation:g}")
        if stats.get("alpha_ci") is not None:
            self.interval(stats["alpha_ci"], f"{where}.alpha_ci", 0.0, 1.0)
        if stats.get("engine_alpha") is not None:
            self.probability(stats["engine_alpha"], f"{where}.engine_alpha")
        if stats.get("engine_alpha_ci") is not None:
            self.interval(stats["engine_alpha_ci"], f"{where}.engine_alpha_ci", 0.0, 1.0)
        if stats.get("fingerprint") is not None:
            self.text(stats["fingerprint"], f"{where}.fingerprint")
        warnings = self.array(stats.get("warnings", []), f"{where}.warnings")
        for index, warning in enumerate(warnings):
            self.text(warning, f"{where}.warnings[{index}]")
        implied_ks: set[int] = set()
        for index, implied in enumerate(self.array(stats.get("implied", []), f"{where}.implied")):
            at = f"{where}.implied[{index}]"
            self.obj(implied, at, _IMPLIED_KEYS, {"k", "mu"})
            k = self.integer(implied["k"], f"{at}.k", 1)
            for name in ("mu", "mu_positional"):
                if implied.get(name) is None:
                    continue
                mu = self.number(implied[name], f"{at}.{name}")
                if not 1.0 <= mu <= k + 1:
                    self.fail(f"{at}.{name}", f"must be in [1, k + 1] = [1, {k + 1}], got {mu:g}")
            if k in implied_ks:
                self.fail(at, f"duplicate entry for k {k}")
            implied_ks.add(k)
        seen: set[int] = set()
        for index, decoded in enumerate(self.array(stats.get("decoded", []), f"{where}.decoded")):
            at = f"{where}.decoded[{index}]"
            self.obj(decoded, at, _DECODED_KEYS, {"k", "mu"})
            k = self.integer(decoded["k"], f"{at}.k", 1)
            mu = self.number(decoded["mu"], f"{at}.mu")
            if not 1.0 <= mu <= k + 1:
                self.fail(f"{at}.mu", f"must be in [1, k + 1] = [1, {k + 1}], got {mu:g}")
            if decoded.get("sigma") is not None:
                self.non_negative(decoded["sigma"], f"{at}.sigma")
            if decoded.get("samples") is not None:
                self.integer(decoded["samples"], f"{at}.samples", 1)
            if decoded.get("mu_ci") is not None:
                self.interval(decoded["mu_ci"], f"{at}.mu_ci", 1.0, k + 1.0)
            if decoded.get("sigma_ci") is not None:
                self.interval(decoded["sigma_ci"], f"{at}.sigma_ci", 0.0)
            if decoded.get("prompts") is not None:
                self.integer(decoded["prompts"], f"{at}.prompts", 1)
            if decoded.get("fingerprint") is not None:
                self.text(decoded["fingerprint"], f"{at}.fingerprint")
            if k in seen:
                self.fail(at, f"duplicate entry for k {k}")
            seen.add(k)


def _is_temperature_key(key: str) -> bool:
    if not key.startswith("t"):
        return False
    try:
        temperature = float(key[1:])
    except ValueError:
        return False
    return math.isfinite(temperature) and temperature > 0


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), f"the number {value!r}" if isinstance(value, (int, float)) else type(value).__name__)


def _show(value: Any) -> str:
    return "null" if value is None else repr(value)


# --------------------------------------------------------------------------- conversion


def _profile_from_dict(payload: dict[str, Any]) -> Profile:
    return Profile(
        schema_version=payload["schema_version"],
        target=payload["target"],
        device=payload["device"],
        created=payload.get("created"),
        notes=payload.get("notes"),
        meta=dict(payload.get("meta", {})),
        models=[
            ModelProfile(
                name=model["name"],
                fingerprint=model["fingerprint"],
                latency=[
                    LatencyPoint(
                        context_length=int(point["context_length"]),
                        k=int(point["k"]),
                        median_s=float(point["median_s"]),
                        iqr_s=float(point.get("iqr_s", 0.0)),
                        repeats=None if point.get("repeats") is None else int(point["repeats"]),
                        samples_s=None if point.get("samples_s") is None else tuple(float(v) for v in point["samples_s"]),
                        outliers=None if point.get("outliers") is None else int(point["outliers"]),
                    )
                    for point in model["latency"]
                ],
                prefill=[
                    PrefillPoint(
                        context_length=int(point["context_length"]),
                        median_s=float(point["median_s"]),
                        iqr_s=float(point.get("iqr_s", 0.0)),
                        repeats=None if point.get("repeats") is None else int(point["repeats"]),
                    )
                    for point in model.get("prefill", [])
                ],
                meta=dict(model.get("meta", {})),
                latency_fingerprint=model.get("latency_fingerprint"),
            )
            for model in payload["models"]
        ],
        pairs=[
            PairProfile(
                verifier=pair["verifier"],
                drafter=pair["drafter"],
                sampling={mode: _sampling_from_dict(stats) for mode, stats in pair["sampling"].items()},
            )
            for pair in payload["pairs"]
        ],
    )


def _sampling_from_dict(stats: dict[str, Any]) -> SamplingStats:
    spread = stats.get("alpha_distribution")
    return SamplingStats(
        alpha=float(stats["alpha"]),
        alpha_samples=None if stats.get("alpha_samples") is None else int(stats["alpha_samples"]),
        alpha_distribution=None
        if spread is None
        else AlphaDistribution(
            mean=float(spread["mean"]),
            std=float(spread["std"]),
            quantiles={str(level): float(value) for level, value in spread.get("quantiles", {}).items()},
            samples=None if spread.get("samples") is None else int(spread["samples"]),
            autocorrelation=None if spread.get("autocorrelation") is None else float(spread["autocorrelation"]),
        ),
        decoded=[
            DecodedStats(
                k=int(item["k"]),
                mu=float(item["mu"]),
                sigma=None if item.get("sigma") is None else float(item["sigma"]),
                samples=None if item.get("samples") is None else int(item["samples"]),
                mu_ci=_interval(item.get("mu_ci")),
                sigma_ci=_interval(item.get("sigma_ci")),
                prompts=None if item.get("prompts") is None else int(item["prompts"]),
                fingerprint=item.get("fingerprint"),
            )
            for item in stats.get("decoded", [])
        ],
        alpha_ci=_interval(stats.get("alpha_ci")),
        implied=[
            ImpliedStats(
                k=int(item["k"]),
                mu=float(item["mu"]),
                mu_positional=None if item.get("mu_positional") is None else float(item["mu_positional"]),
            )
            for item in stats.get("implied", [])
        ],
        fingerprint=stats.get("fingerprint"),
        warnings=[str(warning) for warning in stats.get("warnings", [])],
        engine_alpha=None if stats.get("engine_alpha") is None else float(stats["engine_alpha"]),
        engine_alpha_ci=_interval(stats.get("engine_alpha_ci")),
    )


def _interval(value: Any) -> tuple[float, float] | None:
    return None if value is None else (float(value[0]), float(value[1]))


def _drop_none(mapping: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in mapping.items() if value is not None}


def _profile_to_dict(profile: Profile) -> dict[str, Any]:
    payload: dict[str, Any] = _drop_none(
        {
            "schema_version": profile.schema_version,
            "target": profile.target,
            "device": profile.device,
            "created": profile.created,
            "notes": profile.notes,
        }
    )
    if profile.meta:
        payload["meta"] = profile.meta
    payload["models"] = []
    for model in profile.models:
        entry: dict[str, Any] = {
            "name": model.name,
            "fingerprint": model.fingerprint,
            "latency": [
                _drop_none(
                    {
                        "context_length": point.context_length,
                        "k": point.k,
                        "median_s": point.median_s,
                        "iqr_s": point.iqr_s,
                        "repeats": point.repeats,
                        "samples_s": None if point.samples_s is None else list(point.samples_s),
                        "outliers": point.outliers,
                    }
                )
                for point in model.latency
            ],
        }
        if model.prefill:
            entry["prefill"] = [
                _drop_none(
                    {
                        "context_length": point.context_length,
                        "median_s": point.median_s,
                        "iqr_s": point.iqr_s,
                        "repeats": point.repeats,
                    }
                )
                for point in model.prefill
            ]
        if model.latency_fingerprint is not None:
            entry["latency_fingerprint"] = model.latency_fingerprint
        if model.meta:
            entry["meta"] = model.meta
        payload["models"].append(entry)
    payload["pairs"] = [
        {
            "verifier": pair.verifier,
            "drafter": pair.drafter,
            "sampling": {mode: _sampling_to_dict(stats) for mode, stats in pair.sampling.items()},
        }
        for pair in profile.pairs
    ]
    return payload


def _sampling_to_dict(stats: SamplingStats) -> dict[str, Any]:
    entry: dict[str, Any] = {"alpha": stats.alpha}
    if stats.alpha_samples is not None:
        entry["alpha_samples"] = stats.alpha_samples
    if stats.alpha_ci is not None:
        entry["alpha_ci"] = list(stats.alpha_ci)
    if stats.engine_alpha is not None:
        entry["engine_alpha"] = stats.engine_alpha
    if stats.engine_alpha_ci is not None:
        entry["engine_alpha_ci"] = list(stats.engine_alpha_ci)
    if stats.alpha_distribution is not None:
        spread = stats.alpha_distribution
        entry["alpha_distribution"] = _drop_none(
            {
                "mean": spread.mean,
                "std": spread.std,
                "quantiles": dict(spread.quantiles),
                "samples": spread.samples,
                "autocorrelation": spread.autocorrelation,
            }
        )
    if stats.implied:
        entry["implied"] = [
            _drop_none({"k": item.k, "mu": item.mu, "mu_positional": item.mu_positional}) for item in stats.implied
        ]
    if stats.decoded:
        entry["decoded"] = [
            _drop_none(
                {
                    "k": item.k,
                    "mu": item.mu,
                    "sigma": item.sigma,
                    "samples": item.samples,
                    "mu_ci": None if item.mu_ci is None else list(item.mu_ci),
                    "sigma_ci": None if item.sigma_ci is None else list(item.sigma_ci),
                    "prompts": item.prompts,
                    "fingerprint": item.fingerprint,
                }
            )
            for item in stats.decoded
        ]
    if stats.fingerprint is not None:
        entry["fingerprint"] = stats.fingerprint
    if stats.warnings:
        entry["warnings"] = list(stats.warnings)
    return entry
