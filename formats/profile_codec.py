"""The profile's one JSON codec: decode (validating every field once, while building the
dataclasses of `formats.profile`), encode, and the migration of version-1 files.

Each field's check is named in its dataclass field's metadata (`formats.profile.spec`); this
module holds the checkers, the few checks that span fields (μ within [1, k + 1], duplicates,
names a pair refers to), and `encode`, which walks the same fields. Every failure is one
`PolyplanError` line ``label: field.path: problem``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from polyplan.formats.atomic import write_text_atomically
from polyplan.formats.errors import PolyplanError
from polyplan.formats.kinds import foreign_file
from polyplan.formats.overhead import overhead_from_json, switch_cost
from polyplan.formats.processor import Processor, processor_from_json
from polyplan.formats.profile import (
    SCHEMA_VERSION, AgreementRuns, EngineCalibration, LoopCalibration, ModelProfile,
    PairAgreement, PairProfile, Profile, ProfilerRecord, SamplingStats, SwitchCosts, TargetStream, TimingHealth,
)
from polyplan.formats.sampling import SamplingMode

MAX_INTEGER = 2**53  # integers beyond it lose precision as floats (and 10^400 overflows one)
MAX_SECONDS = 1e6  # bound on a timed pass: larger values overflow the planner's sums to inf

# Version 1 kept these under the profile's `meta` (old key -> field) and each model's timing
# health in the model's `meta`.
V1_META_FIELDS = {
    "profiler": "profiler", "loop_overhead": "loop_overhead", "engine_overhead": "engine_overhead",
    "switch_cost": "switch_costs", "acceptance_runs": "acceptance_runs",
}
V1_TIMING_KEYS = tuple(field.name for field in dataclasses.fields(TimingHealth))


# --------------------------------------------------------------------------- entry points


def load(path: str | os.PathLike[str]) -> Profile:
    """Read and validate a profile; any problem raises `PolyplanError` naming file and field."""
    from polyplan.formats.inputs import read_json_file

    return decode(read_json_file(path, "file"), label=str(path))


def decode(payload: Any, *, label: str = "profile") -> Profile:
    """Validate a parsed JSON object and build the `Profile` (errors are prefixed `label`);
    a version-1 object is migrated (module docstring of `formats.profile`)."""
    reader = _Reader(label)
    payload = reader.versioned(payload)
    profile = reader.profile(payload)
    profile.source = label
    return profile


def encode(profile: Profile) -> dict[str, Any]:
    """The JSON object of `profile` (optional fields left out when unset)."""
    payload = _encode_record(profile)
    return {"schema_version": payload.pop("schema_version"), **payload}


def save(profile: Profile, path: str | os.PathLike[str]) -> None:
    """Validate, then write atomically (temporary file in the same folder + os.replace)."""
    path = Path(path)
    payload = encode(profile)
    decode(payload, label=str(path))
    write_text_atomically(path, json.dumps(payload, indent=2, allow_nan=False) + "\n")


# --------------------------------------------------------------------------- encoding


def _fields(cls) -> tuple[dataclasses.Field, ...]:
    return tuple(field for field in dataclasses.fields(cls) if "json" in field.metadata)


def _encode_value(value: Any) -> Any:
    if isinstance(value, Processor):
        return value.to_json()
    if dataclasses.is_dataclass(value):
        return _encode_record(value)
    if isinstance(value, Mapping):
        return {key: _encode_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode_value(item) for item in value]
    return value


def _encode_record(record: Any) -> dict[str, Any]:
    entry = {}
    for field in _fields(type(record)):
        value = getattr(record, field.name)
        empty = value is None or (isinstance(value, (list, tuple, Mapping)) and not value and not field.metadata["always"])
        if field.metadata["json"] == "flag" and value is False:
            empty = True
        if not empty:
            entry[field.name] = _encode_value(value)
    return entry


# --------------------------------------------------------------------------- decoding


class _Reader:
    """Checks a parsed profile while building it; each failure is one line `label: field.path: problem`."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.origin: dict[str, str] = {}  # field -> where a version-1 file kept it (for messages)
        self.names: set[str] = set()

    def fail(self, where: str, problem: str) -> None:
        raise PolyplanError(f"{self.label}: {where}: {problem}" if where else f"{self.label}: {problem}")

    # ---- version and migration
    def versioned(self, payload: Any) -> dict[str, Any]:
        """`payload` as a version-2 object: checked for its kind and version, migrated from 1."""
        if not isinstance(payload, dict):
            self.fail("", f"must hold one JSON object, got {_kind(payload)}")
        foreign = foreign_file(payload, "profile")
        if foreign is not None:
            self.fail("", foreign)
        version = payload.get("schema_version")
        if version == 1 and not isinstance(version, bool):
            return self.migrated(payload)
        if version != SCHEMA_VERSION or isinstance(version, bool):
            self.fail(
                "schema_version",
                f"unsupported version {_show(version)}; this polyplan reads version "
                f"{SCHEMA_VERSION} (and migrates version 1) (re-run the profiler or upgrade polyplan)",
            )
        return payload

    def migrated(self, payload: dict[str, Any]) -> dict[str, Any]:
        """A version-1 object as version 2: the profiler's entries leave `meta` for their fields."""
        payload = {**payload, "schema_version": SCHEMA_VERSION}
        meta = payload.get("meta")
        if isinstance(meta, dict):
            meta = dict(meta)
            for old, new in V1_META_FIELDS.items():
                if meta.get(old) is None:
                    meta.pop(old, None)  # read as absent before
                elif new != "profiler" or self.quietly_valid(meta[old], "profiler"):
                    payload[new] = meta.pop(old)
                    self.origin[new] = f"meta.{old}"
            if "engine_overhead" in payload:
                payload["engine_overhead"] = _engine_details(payload["engine_overhead"])
                # else: read leniently before; a malformed record stays in meta, the user's
            payload["meta"] = meta
            if not meta:
                del payload["meta"]
        if isinstance(payload.get("models"), list):
            payload["models"] = [self.migrated_model(model) for model in payload["models"]]
        return payload

    def migrated_model(self, model: Any) -> Any:
        if not isinstance(model, dict) or not isinstance(model.get("meta"), dict):
            return model
        meta = dict(model["meta"])
        timing = {key: meta[key] for key in V1_TIMING_KEYS if key in meta}
        if not timing or not self.quietly_valid(timing, "timing"):
            return model  # read leniently before: values of another type were ignored, and stay the user's
        for key in timing:
            del meta[key]
        model = {**model, "timing": timing, "meta": meta}
        if not meta:
            del model["meta"]
        return model

    def quietly_valid(self, value: Any, kind: str) -> bool:
        """Whether a version-1 record the old readers took leniently is valid as its new type."""
        if value is None:
            return True
        try:
            self.record(ProfilerRecord if kind == "profiler" else TimingHealth, value, kind)
        except PolyplanError:
            return False
        return True

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

    def within(self, value: Any, where: str, low: float, high: float) -> float:
        number = self.number(value, where)
        if not low <= number <= high:
            self.fail(where, f"must be in [{low:g}, {high:g}], got {number:g}")
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

    def text(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value.strip():
            self.fail(where, f"must be a non-empty string, got {_show(value)}")
        return value

    def probability(self, value: Any, where: str) -> float:
        number = self.number(value, where)
        if not 0.0 <= number < 1.0:
            self.fail(where, f"must be in [0, 1), got {number:g}")
        return number

    def interval(self, value: Any, where: str, low: float | None = None, high: float | None = None) -> tuple[float, float]:
        """A confidence interval `[low, high]` of finite numbers, optionally within bounds."""
        if not isinstance(value, list) or len(value) != 2:
            self.fail(where, f"must be a [low, high] array of two numbers, got {_show(value)}")
        lo, hi = self.number(value[0], f"{where}[0]"), self.number(value[1], f"{where}[1]")
        if lo > hi:
            self.fail(where, f"low {lo:g} is above high {hi:g}")
        if (low is not None and lo < low) or (high is not None and hi > high):
            bounds = f"[{'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'}]"
            self.fail(where, f"must lie within {bounds}, got [{lo:g}, {hi:g}]")
        return lo, hi

    def array(self, value: Any, where: str) -> list:
        if not isinstance(value, list):
            self.fail(where, f"must be a JSON array, got {_kind(value)}")
        return value

    def free(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(where, f"must be a JSON object, got {_kind(value)}")
        self.finite_everywhere(value, where)
        return dict(value)

    def finite_everywhere(self, value: Any, where: str) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(where, f"must be a finite number, got {value!r}".replace("nan", "NaN"))
        if isinstance(value, dict):
            for key, item in value.items():
                self.finite_everywhere(item, _join(where, str(key)))
        if isinstance(value, list):
            for index, item in enumerate(value):
                self.finite_everywhere(item, f"{where}[{index}]")

    # ---- the checkers a field names (`formats.profile.spec`)
    def check(self, field: dataclasses.Field, value: Any, where: str, done: dict[str, Any]) -> Any:
        kind, of = field.metadata["json"], field.metadata["of"]
        if kind == "count0":
            return self.integer(value, where, 0)
        if kind == "count1":
            return self.integer(value, where, 1)
        if kind == "seconds":
            return self.seconds(value, where)
        if kind == "non_negative":
            return self.non_negative(value, where)
        if kind == "probability":
            return self.probability(value, where)
        if kind == "unit":
            return self.within(value, where, 0.0, 1.0)
        if kind == "correlation":
            return self.within(value, where, -1.0, 1.0)
        if kind == "mu":
            mu, k = self.number(value, where), done["k"]
            if not 1.0 <= mu <= k + 1:
                self.fail(where, f"must be in [1, k + 1] = [1, {k + 1}], got {mu:g}")
            return mu
        if kind == "unit_interval":
            return self.interval(value, where, 0.0, 1.0)
        if kind == "mu_interval":
            return self.interval(value, where, 1.0, done["k"] + 1.0)
        if kind == "non_negative_interval":
            return self.interval(value, where, 0.0)
        if kind == "text":
            return self.text(value, where)
        if kind == "string":
            if not isinstance(value, str):
                self.fail(where, f"must be a string, got {_kind(value)}")
            return value
        if kind == "flag":
            if not isinstance(value, bool):
                self.fail(where, f"must be true or false, got {_show(value)}")
            return value
        if kind == "texts":
            return [self.text(item, f"{where}[{index}]") for index, item in enumerate(self.array(value, where))]
        if kind == "timings":
            samples = self.array(value, where)
            if not samples:
                self.fail(where, "must hold at least one timing")
            return tuple(self.positive(item, f"{where}[{index}]") for index, item in enumerate(samples))
        if kind == "quantiles":
            return self.quantiles(value, where)
        if kind == "free":
            return self.free(value, where)
        if kind == "record":
            return self.record(of, value, where)
        if kind == "processor":
            try:
                return processor_from_json(value, where)
            except PolyplanError as error:
                raise PolyplanError(f"{self.label}: {error}") from None
        if kind == "records":
            records = [self.record(of, item, f"{where}[{index}]") for index, item in enumerate(self.array(value, where))]
            return records if field.default_factory is list else tuple(records)
        if kind == "modes":
            return self.modes(of, value, where)
        if kind == "engines":
            if not isinstance(value, dict) or not all(isinstance(table, dict) for table in value.values()):
                self.fail(where, "must be an object keyed by engine, then by sampling mode")
            return {engine: self.modes(of, table, f"{where}.{engine}") for engine, table in value.items()}
        if kind == "switch_table":
            if not isinstance(value, dict):
                self.fail(where, "must map model names to seconds")
            return {str(name): self.switch(cost, f"{where}.{name}") for name, cost in value.items()}
        if kind == "token_ids":
            ids = self.array(value, where)
            if not ids:
                self.fail(where, "must hold at least one token id")
            return tuple(self.integer(item, f"{where}[{index}]", 0) for index, item in enumerate(ids))
        if kind == "bits":
            if not isinstance(value, list) or any(not isinstance(text, str) or set(text) - {"0", "1"} for text in value):
                self.fail(where, "strings of 0 and 1 only")
            return tuple(value)
        raise AssertionError(f"no checker {kind!r}")  # a field of formats.profile names an unknown check

    def switch(self, value: Any, where: str) -> tuple[float, ...]:
        try:
            return switch_cost(value, where)
        except PolyplanError as error:
            raise PolyplanError(f"{self.label}: {error}") from None

    def quantiles(self, value: Any, where: str) -> dict[str, float]:
        if not isinstance(value, dict):
            self.fail(where, f"must be a JSON object, got {_kind(value)}")
        for level, quantile in value.items():
            try:
                probability = float(level)
            except ValueError:
                probability = math.nan
            if not 0.0 <= probability <= 1.0:
                self.fail(where, f"key {level!r} is not a probability in [0, 1]")
            number = self.number(quantile, f"{where}.{level}")
            if not 0.0 <= number <= 1.0:
                self.fail(f"{where}.{level}", f"must be in [0, 1], got {number:g}")
        return {str(level): float(quantile) for level, quantile in value.items()}

    def modes(self, of: type, value: Any, where: str) -> dict[str, Any]:
        """A map keyed by sampling mode (`SamplingMode` keys, written canonically)."""
        if not isinstance(value, dict):
            self.fail(where, "must be an object keyed by sampling mode")
        decoded = {}
        for key, entry in value.items():
            try:
                mode = SamplingMode.parse(key, where)
            except PolyplanError as error:
                raise PolyplanError(f"{self.label}: {error}") from None
            decoded[mode.key] = self.record(of, entry, f"{where}.{key}")
        return decoded

    # ---- records
    def record(self, cls: type, value: Any, where: str) -> Any:
        """The dataclass `cls` from its JSON object: every field checked as its metadata says."""
        self.before(cls, value, where)
        fields = _fields(cls)
        required = {f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        self.obj(value, where, {f.name for f in fields}, required)
        done: dict[str, Any] = {}
        for field in fields:
            if field.name not in value or (value[field.name] is None and field.default is None):
                continue
            done[field.name] = self.check(field, value[field.name], _join(where, field.name), done)
        built = cls(**done)
        self.after(built, where)
        return built

    def before(self, cls: type, value: Any, where: str) -> None:
        """Checks that keep the messages the version-1 readers gave for these records."""
        if cls in (LoopCalibration, EngineCalibration):
            try:
                overhead_from_json(value, where)
            except PolyplanError as error:
                raise PolyplanError(f"{self.label}: {error}") from None
        if cls is SwitchCosts and not isinstance(value, dict):
            self.fail(where, "must be an object with 'models' (model name -> seconds)")
        if cls is AgreementRuns and not isinstance(value.get("pairs") if isinstance(value, dict) else None, list):
            self.fail(f"{where}.pairs", "must be a list")
        if cls is PairAgreement and not (isinstance(value, dict) and {"verifier", "drafter", "agreement"} <= set(value)):
            self.fail(where, "needs verifier, drafter and agreement (strings of 0/1)")

    def after(self, built: Any, where: str) -> None:
        """Checks that span the fields of one record."""
        if isinstance(built, ModelProfile):
            if not built.latency:
                self.fail(f"{where}.latency", "must hold at least one point")
            self.unique([(p.context_length, p.k) for p in built.latency], f"{where}.latency",
                        lambda key: f"duplicate point for context_length {key[0]}, k {key[1]}")
        if isinstance(built, SamplingStats):
            for name, entries in (("implied", built.implied), ("decoded", built.decoded)):
                self.unique([entry.k for entry in entries], f"{where}.{name}", lambda k: f"duplicate entry for k {k}")
        if isinstance(built, TargetStream) and built.prompt_tokens > len(built.ids):
            self.fail(f"{where}.prompt_tokens", f"{built.prompt_tokens} is more than the stream's {len(built.ids)} ids")
        if isinstance(built, PairProfile):
            for role in ("verifier", "drafter"):
                if getattr(built, role) not in self.names:
                    self.fail(f"{where}.{role}", f"{getattr(built, role)!r} is not one of the models")
            if built.verifier == built.drafter:
                self.fail(where, f"verifier and drafter are both {built.verifier!r}")
            if not built.sampling:
                self.fail(f"{where}.sampling", "must be a non-empty JSON object keyed by sampling mode")

    def unique(self, keys: list, where: str, problem) -> None:
        seen = set()
        for index, key in enumerate(keys):
            if key in seen:
                self.fail(f"{where}[{index}]", problem(key))
            seen.add(key)

    # ---- the whole profile
    def profile(self, payload: dict[str, Any]) -> Profile:
        fields = {f.name: f for f in _fields(Profile)}
        required = {"schema_version", "target", "device", "models", "pairs"}
        self.obj(payload, "", set(fields), required)
        done: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
        for name in ("target", "device", "processor", "created", "notes", "meta"):
            if name in payload and not (payload[name] is None and fields[name].default is None):
                done[name] = self.check(fields[name], payload[name], name, done)
        models = self.array(payload["models"], "models")
        if not models:
            self.fail("models", "must list at least the target model")
        done["models"] = []
        for index, model in enumerate(models):
            entry = self.record(ModelProfile, model, f"models[{index}]")
            if entry.name in self.names:
                self.fail(f"models[{index}].name", f"duplicate model name {entry.name!r}")
            self.names.add(entry.name)
            done["models"].append(entry)
        if done["target"] not in self.names:
            self.fail("target", f"{done['target']!r} is not one of the models ({', '.join(sorted(self.names))})")
        done["pairs"] = self.check(fields["pairs"], payload["pairs"], "pairs", done)
        self.unique([(p.verifier, p.drafter) for p in done["pairs"]], "pairs",
                    lambda key: f"duplicate pair verifier {key[0]!r}, drafter {key[1]!r}")
        for name in ("profiler", "loop_overhead", "engine_overhead", "switch_costs", "acceptance_runs"):
            if payload.get(name) is not None:
                done[name] = self.check(fields[name], payload[name], self.origin.get(name, name), done)
        return Profile(**done)


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


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), f"the number {value!r}" if isinstance(value, (int, float)) else type(value).__name__)


def _show(value: Any) -> str:
    return "null" if value is None else repr(value)
