"""plan.json: what `polyplan recommend` writes and `validate`, `export`, `bench` and the decoder read
(its types and its reader; `planner.plan_file` holds the math that builds one).

Format (``plan_version`` 2; each ranked chain is stored once, the plan's own chain first)::

    {
      "plan_version": 2,
      "target": "vicuna-7b",
      "device": "...",                       # copied from the profile
      "processor": {"name": "AMD EPYC 9R14", …},   # copied from the profile (formats.processor);
                                             # null or absent: not recorded (older profiles)
      "sampling": "greedy",                  # the profile key the plan was made for
      "fingerprints": {"vicuna-7b": "...", …},   # of every profiled model, from the profile
      "profile": {"path": "profile.json", "schema_version": 1,
                  "digest": "sha256:..."},  # optional: of the profile planned on (plan_check)
      "candidates": {"path": "/abs/models.yaml", "yaml": {...}},   # optional: how to load the
                                             # models again (the file and its parsed contents)
      "loop_overhead": {"per_step_s": ..., "per_round_s": ...},    # or null: see planner.exact.overhead
      "switch_costs": {"eagle": [0.0002, 0.00005], …},  # per model: extra seconds of the 1st, 2nd, …
                                             # pass after a switch (planner.exact.overhead); {} when none
      "alternatives": [                      # every ranked chain, best first: the first is the
        {                                    # plan's chain (what generate --plan and export run)
          "chain": ["vicuna-7b", "w4", "eagle"],   # from the target down (M_1 … M_n)
          "block_sizes": [7, 1],             # K_1 … K_{n-1}
          "verify_widths": [[[2, 4], [3, 4]], []], # per verifying level, [k, width]: a pass over
                                             # k tokens runs padded to width (planner.exact.verify_width)
          "exact": {                         # the exact model (planner.exact.cost_model)
            "speedup": 2.32, "cost_per_token_s": 0.0107,
            "forwards_per_token": [...], "time_per_token_s": [...],
            "tokens_per_verification": [...], "drafted_per_verification": [...],
            "wasted_per_verification": [...], "acceptances": [...], "overhead_per_token_s": ...,
            "interval": [2.18, 2.41]         # optional: bootstrap interval of "speedup"
          },                                 # (planner.intervals.prediction_interval)
          "paper": {                         # Lemma 3.1 (planner.paper.paper_model)
            "speedup": 4.54, "time_per_token_s": ..., "phi_per_token": [...],
            "mean_lengths": [...], "length_sources": ["decoded", "eq3"], "alpha_scale": 1
          },
          "insertion_verdicts": [{"model": "w4", "verdict": "helps"}]   # per intermediate model
        }                                    # (Theorem 3.2, planner.paper.insertion)
      ],
      "insertions": ["in: w4: ...", ...],
      "prediction_intervals": {              # optional (absent in older plans)
        "level": 0.95, "resamples": 200, "seed": 0,
        "latency_source": "samples", "acceptance_source": "runs",
        "tied_with_best": [["vicuna-7b", "eagle"]],   # chains whose interval overlaps the best's
        "ranking": "ranking: cannot tell ... apart from: ...",
        "widened": ["gemma: latency x [0.68, 0.99] (the machine floor was 1.52x slower ...)"],
        "prompt_stretch": 1.12           # optional: each replicate stretched for few prompts
      },
      "warnings": ["..."],                   # optional: why the timings are doubtful
                                             # (planner.intervals.timing_health); [] when none
      "physical_limit": {                    # optional (null or absent in older plans): what a
        "speedup": 2.02, "block_size": 6,    # free, always-right drafter gives (planner.exact.physical_limit)
        "measured_block_size": 7,            # the widest K whose width K + 1 the target was timed at
        "speedups": [1.4, 1.7, ...],         # S(K) for K = 1 …
        "interval": [1.95, 2.09]             # optional: bootstrap interval of "speedup"
      },
      "insertion_triples": [                 # optional ([] or absent in older plans): Theorem 3.2
        {"upper": "vicuna-7b", "middle": "w4", "lower": "eagle",   # on each insertion that matters
         "with": {"chain": [...], "block_sizes": [7, 1], "exact_speedup": 2.32},
         "without": {"chain": [...], "block_sizes": [5], "exact_speedup": 2.12},
         "condition1": {"lhs": 0.28, "rhs": 0.37, "holds": true}, "condition2": {...},
         "assumptions_hold": false, "theorem_guarantees_gain": false,   # planner.paper.insertion_triples
         "lemma31_difference_s": -0.0021, "line": "w4 between vicuna-7b and eagle: ..."}
      ],
      "search": {"max_levels": 4, "k_max": 8, "method": "grid", "context_length": null,
                 "acceptance_model": "iid"}   # or "runs": see planner.exact.runs
    }

A version-1 plan (polyplan before plan version 2) still reads: `decode_plan` migrates it on
read (`migrate_v1`). Version 1 repeated the first chain at the top level (`chain`,
`block_sizes`, `verify_widths`, `predicted`, `paper`) and its predicted speedups in each
entry (`exact_speedup`, `paper_speedup`, `acceptances`), and called the verdicts
`theorem_3_2`; a version-1 plan whose top level disagrees with its first chain was edited
and is refused.

This module is its one codec: `encode_plan` / `save_plan` write a `PlanFile`, and
`formats.plan.read_plan` reads it into a frozen `PlanFile` (every field a consumer reads,
validated once, each failure one `PolyplanError` naming the file and the field);
`planner.plan_file.plan_of` builds one from the planner's `Recommendation`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from polyplan.formats.atomic import write_text_atomically
from polyplan.formats.errors import PolyplanError
from polyplan.formats.inputs import is_finite_number, read_json_file
from polyplan.formats.kinds import foreign_file
from polyplan.formats.overhead import LoopOverhead, SwitchCost, overhead_from_json, switch_cost
from polyplan.formats.processor import Processor, processor_from_json
from polyplan.formats.sampling import SamplingMode

PLAN_VERSION = 2


@dataclass(frozen=True)
class VerifyWidths:
    """At which width a verification pass over k tokens runs: `pads` lists (k, width) with
    width > k, k increasing; every other k runs at width k."""

    pads: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        ks = [k for k, _ in self.pads]
        if any(b <= a for a, b in zip(ks, ks[1:])):
            raise PolyplanError(f"verify_widths: k values must increase, got {ks}")
        for k, width in self.pads:
            if isinstance(k, bool) or isinstance(width, bool) or not isinstance(k, int) or not isinstance(width, int):
                raise PolyplanError(f"verify_widths: ({k!r}, {width!r}) must be integers")
            if not 1 <= k < width:
                raise PolyplanError(f"verify_widths: width {width} for {k} tokens must be larger than {k} >= 1")

    def width(self, k: int) -> int:
        """The width a pass over `k` tokens runs at (k itself unless padded)."""
        for tokens, width in self.pads:
            if tokens == k:
                return width
        return k

    @property
    def max_padding(self) -> int:
        """The most extra tokens one padded pass adds (0 when none)."""
        return max((width - k for k, width in self.pads), default=0)

    def to_json(self) -> list[list[int]]:
        return [[k, width] for k, width in self.pads]


NO_PADDING = VerifyWidths()


def verify_widths_from_json(value: Any, where: str) -> VerifyWidths:
    """`VerifyWidths` from its JSON form [[k, width], …]; `PolyplanError` naming `where`."""
    if not isinstance(value, list) or not all(isinstance(pair, list) and len(pair) == 2 for pair in value):
        raise PolyplanError(f"{where}: must be a list of [k, width] pairs")
    try:
        return VerifyWidths(tuple((pair[0], pair[1]) for pair in value))
    except PolyplanError as error:
        raise PolyplanError(f"{where}: {str(error).removeprefix('verify_widths: ')}") from None


@dataclass(frozen=True)
class PlannedChain:
    """One ranked chain of a plan with what both models predicted for it (models M_1 first)."""

    chain: tuple[str, ...]
    block_sizes: tuple[int, ...]
    exact_speedup: float
    paper_speedup: float
    acceptances: tuple[float, ...]  # α_{i,i+1} per level
    forwards_per_token: tuple[float, ...]  # exact model, per model
    tokens_per_verification: tuple[float, ...]  # exact model, per verifying level
    drafted_per_verification: tuple[float, ...]  # exact model: E[m], tokens handed up per verification
    time_per_token_s: tuple[float, ...]  # exact model: seconds in each model's forwards per token
    paper_phi_per_token: tuple[float, ...]  # Lemma 3.1's φ_i / N, per model
    paper_mean_lengths: tuple[float, ...]  # Lemma 3.1's E[L_i], per verifying level
    overhead_per_token_s: float  # the loop overhead the exact model included (0 when none)
    exact_interval: tuple[float, float] | None = None  # bootstrap interval of exact_speedup (None: not made)
    # per verifying level, the padded widths the exact model assumed (planner.exact.verify_width);
    # () in a plan from before they were recorded: the decoder then never pads
    verify_widths: tuple[VerifyWidths, ...] = ()
    # The rest of what the plan records for people (None / () in plans that lack them):
    cost_per_token_s: float | None = None  # exact model: seconds per emitted token
    wasted_per_verification: tuple[float, ...] = ()  # exact model: drafted tokens rejected, per level
    paper_time_per_token_s: float | None = None  # Lemma 3.1's T / N
    paper_length_sources: tuple[str, ...] = ()  # "decoded" or "eq3" per level
    paper_alpha_scale: float | None = None
    # (intermediate model, "helps" / "no_gain"): Theorem 3.2's verdict (planner.paper.insertion)
    insertion_verdicts: tuple[tuple[str, str], ...] = ()
    check: ChainCheck | None = None  # recommend's self-check of this chain (None: not checked)

    def label(self) -> str:
        return " > ".join(self.chain)

    @property
    def predicted_speedup(self) -> float:
        """What the plan predicts: the exact model, corrected by the self-check where one ran."""
        return self.check.speedup if self.check is not None else self.exact_speedup

    @property
    def predicted_interval(self) -> tuple[float, float] | None:
        """The interval of `predicted_speedup` (the self-check's, widened by its term's uncertainty)."""
        return self.check.interval if self.check is not None else self.exact_interval


@dataclass(frozen=True)
class ChainCheck:
    """recommend's self-check of one chain (`validation.self_check`): the composition term C, the
    exact model's error on this machine's time per token with acceptance as measured, from a
    short run of the chain beside target-only decoding; the prediction it gives, exact / C,
    and that prediction's interval (the exact interval widened by C's).

    pooled: C was not measured on this chain but taken from the chains that were (their
    median, its interval spanning theirs)."""

    composition: float
    composition_low: float
    composition_high: float
    speedup: float
    interval: tuple[float, float] | None
    measured: float | None  # the paired speedup the check measured on this chain (None: pooled)
    pooled: bool = False


@dataclass(frozen=True)
class IntervalsRecord:
    """How the plan's prediction intervals were made (`planner.intervals.prediction_interval`)."""

    level: float
    resamples: int
    seed: int
    latency_source: str
    acceptance_source: str
    tied_with_best: tuple[tuple[str, ...], ...]  # chains whose interval overlaps the best's
    ranking: str
    widened: tuple[str, ...] = ()  # a line per model whose failed timing-health check widened its latency
    prompt_stretch: float = 1.0  # every replicate's deviation stretched for few prompts (1.0 in older plans)


@dataclass(frozen=True)
class LimitRecord:
    """The physical limit the plan was made beside (`planner.exact.physical_limit`)."""

    speedup: float
    block_size: int  # the K reaching it; 0: no K beats the target alone
    measured_block_size: int  # the widest K whose verification width the target was timed at
    speedups: tuple[float, ...]  # S(K) for K = 1 …
    interval: tuple[float, float] | None = None  # bootstrap interval of `speedup` (None: not made)


@dataclass(frozen=True)
class ConditionRecord:
    """One of Theorem 3.2's conditions, `lhs < rhs` (`rhs`, `holds`: None when undetermined)."""

    lhs: float
    rhs: float | None
    holds: bool | None


@dataclass(frozen=True)
class ChainSpeedRecord:
    """A chain (target first), its block sizes and the exact model's speedup."""

    chain: tuple[str, ...]
    block_sizes: tuple[int, ...]
    exact_speedup: float


@dataclass(frozen=True)
class TripleRecord:
    """Theorem 3.2 on inserting `middle` between `upper` and `lower` (`planner.paper.insertion_triples`)."""

    upper: str
    middle: str
    lower: str
    with_chain: ChainSpeedRecord
    without_chain: ChainSpeedRecord
    condition1: ConditionRecord
    condition2: ConditionRecord
    assumptions_hold: bool
    theorem_guarantees_gain: bool
    lemma31_difference_s: float  # Lemma 3.1's eq. 2 − eq. 1 per token (< 0: it helps)
    line: str


@dataclass(frozen=True)
class ProfileRecord:
    """The profile a plan was made from: its path, schema version and digest (`planner.plan_check`)."""

    path: str | None = None
    schema_version: int | None = None
    digest: str | None = None


@dataclass(frozen=True)
class CandidatesRecord:
    """How to load a plan's models again: the models.yaml path, its parsed contents (kept as
    the YAML's own structure: the file may have moved) and the device it was run on."""

    path: str | None = None
    yaml: Any = None
    device: str | None = None


@dataclass(frozen=True)
class SearchRecord:
    """How the plan was searched; None where a plan does not say (each reader has its default)."""

    max_levels: int | None = None
    k_max: int | None = None
    method: str | None = None
    context_length: int | None = None
    acceptance_model: str | None = None


@dataclass(frozen=True)
class SelfCheckRecord:
    """How recommend's self-check ran (`validation.self_check`), or why it did not (`skipped`)."""

    prompts: int = 0
    new_tokens: int = 0
    repeats: int = 0
    seconds: float = 0.0
    checked: tuple[tuple[str, ...], ...] = ()  # the chains run (the rest take the pooled term)
    skipped: str | None = None  # why it did not run (then the intervals ignore the model's own error)


@dataclass(frozen=True)
class PlanFile:
    """The fields of plan.json its readers use, validated once by `read_plan`. The plan's own
    chain is its best ranked chain, `best` (`alternatives[0]`); `chain`, `block_sizes` and
    `fingerprints` are that chain's."""

    target: str
    sampling: str  # a `formats.sampling.SamplingMode` key
    alternatives: tuple[PlannedChain, ...]  # every ranked chain, best first (the plan's own first)
    device: str = ""
    processor: Processor | None = None  # where the profile's timings were taken (None: not recorded)
    # of every profiled model (what `validate` checks the candidates against)
    profiled_fingerprints: Mapping[str, str] = field(default_factory=dict)
    profile: ProfileRecord = ProfileRecord()
    candidates: CandidatesRecord | None = None
    loop_overhead: LoopOverhead | None = None
    switch_costs: Mapping[str, SwitchCost] = field(default_factory=dict)
    search: SearchRecord = SearchRecord()
    warnings: tuple[str, ...] = ()
    insertions: tuple[str, ...] = ()  # why each model is in or out (planner.search)
    prediction_intervals: IntervalsRecord | None = None
    physical_limit: LimitRecord | None = None
    insertion_triples: tuple[TripleRecord, ...] = ()
    self_check: SelfCheckRecord | None = None  # recommend's self-check (None: none ran; `skipped` says why when asked)

    @property
    def best(self) -> PlannedChain:
        """The plan's own chain: the first ranked one."""
        return self.alternatives[0]

    @property
    def chain(self) -> tuple[str, ...]:
        return self.best.chain

    @property
    def block_sizes(self) -> tuple[int, ...]:
        return self.best.block_sizes

    @property
    def fingerprints(self) -> tuple[tuple[str, str], ...]:
        """(name, fingerprint) of the plan's chain's members."""
        return tuple((name, self.profiled_fingerprints[name]) for name in self.chain)


def save_plan(plan: PlanFile, path: str | os.PathLike[str]) -> None:
    """Write plan.json atomically (temporary file in the same folder, then os.replace)."""
    write_text_atomically(path, json.dumps(encode_plan(plan), indent=2, allow_nan=False) + "\n")


def encode_plan(plan: PlanFile) -> dict[str, Any]:
    """The plan.json object of `plan` (the layout in the module docstring)."""
    return {
        "plan_version": PLAN_VERSION,
        "target": plan.target,
        "device": plan.device,
        "processor": None if plan.processor is None else plan.processor.to_json(),
        "sampling": plan.sampling,
        "fingerprints": dict(plan.profiled_fingerprints),
        "profile": {"path": plan.profile.path, "schema_version": plan.profile.schema_version,
                    **({"digest": plan.profile.digest} if plan.profile.digest else {})},
        "candidates": None if plan.candidates is None else {
            "path": plan.candidates.path, "yaml": plan.candidates.yaml, "device": plan.candidates.device,
        },
        "loop_overhead": None if plan.loop_overhead is None else plan.loop_overhead.to_json_dict(),
        "switch_costs": {name: list(cost) for name, cost in plan.switch_costs.items()},
        "alternatives": [_alternative_json(chain) for chain in plan.alternatives],
        "insertions": list(plan.insertions),
        "prediction_intervals": None if plan.prediction_intervals is None else _record_json(plan.prediction_intervals),
        "warnings": list(plan.warnings),
        "search": _record_json(plan.search),
        "physical_limit": None if plan.physical_limit is None else _limit_json(plan.physical_limit),
        "insertion_triples": [_triple_json(triple) for triple in plan.insertion_triples],
        **({} if plan.self_check is None else {"self_check": _record_json(plan.self_check)}),
    }


def _limit_json(limit: LimitRecord) -> dict[str, Any]:
    interval = {} if limit.interval is None else {"interval": list(limit.interval)}
    return {"speedup": limit.speedup, "block_size": limit.block_size, "measured_block_size": limit.measured_block_size,
            "speedups": list(limit.speedups)} | interval


def _triple_json(triple: TripleRecord) -> dict[str, Any]:
    return {
        "upper": triple.upper, "middle": triple.middle, "lower": triple.lower,
        "with": _record_json(triple.with_chain), "without": _record_json(triple.without_chain),
        "condition1": _record_json(triple.condition1), "condition2": _record_json(triple.condition2),
        "assumptions_hold": triple.assumptions_hold, "theorem_guarantees_gain": triple.theorem_guarantees_gain,
        "lemma31_difference_s": triple.lemma31_difference_s, "line": triple.line,
    }


# Each section's JSON keys beside the `PlannedChain` fields they hold, in the file's order.
_EXACT_KEYS = {
    "speedup": "exact_speedup",
    "cost_per_token_s": "cost_per_token_s",
    "forwards_per_token": "forwards_per_token",
    "time_per_token_s": "time_per_token_s",
    "tokens_per_verification": "tokens_per_verification",
    "drafted_per_verification": "drafted_per_verification",
    "wasted_per_verification": "wasted_per_verification",
    "acceptances": "acceptances",
    "overhead_per_token_s": "overhead_per_token_s",
}
_PAPER_KEYS = {
    "speedup": "paper_speedup",
    "time_per_token_s": "paper_time_per_token_s",
    "phi_per_token": "paper_phi_per_token",
    "mean_lengths": "paper_mean_lengths",
    "length_sources": "paper_length_sources",
    "alpha_scale": "paper_alpha_scale",
}


def _plain(value: Any) -> Any:
    """`value` with its tuples (nested ones too) as JSON lists."""
    return [_plain(item) for item in value] if isinstance(value, tuple) else value


def _section_json(record: Any, keys: Mapping[str, str]) -> dict[str, Any]:
    """{JSON key: the record's field} for `keys` (key -> field name)."""
    return {key: _plain(getattr(record, name)) for key, name in keys.items()}


def _record_json(record: Any) -> dict[str, Any]:
    """A record whose JSON keys are its field names, in field order."""
    return _section_json(record, {item.name: item.name for item in fields(record)})


def _alternative_json(chain: PlannedChain) -> dict[str, Any]:
    interval = {} if chain.exact_interval is None else {"interval": list(chain.exact_interval)}
    return {
        "chain": list(chain.chain),
        "block_sizes": list(chain.block_sizes),
        "verify_widths": [widths.to_json() for widths in chain.verify_widths],
        "exact": _section_json(chain, _EXACT_KEYS) | interval,
        "paper": _section_json(chain, _PAPER_KEYS),
        "insertion_verdicts": [{"model": model, "verdict": verdict} for model, verdict in chain.insertion_verdicts],
        **({} if chain.check is None else {"check": _record_json(chain.check)}),
    }


def read_plan(path: str | os.PathLike[str]) -> PlanFile:
    """Read and check plan.json; `PolyplanError` naming the file and field on any problem."""
    label = str(path)
    return decode_plan(read_json_file(path, "file"), label)


def decode_plan(payload: Any, label: str = "plan.json") -> PlanFile:
    """The `PlanFile` of a parsed plan.json object (errors name `label` and the field)."""

    def fail(field: str, problem: str) -> None:
        raise PolyplanError(f"{label}: {field}: {problem}")

    if not isinstance(payload, dict):
        fail("plan", "must be a JSON object")
    foreign = foreign_file(payload, "plan")
    if foreign is not None:
        raise PolyplanError(f"{label}: {foreign}")
    if payload.get("plan_version") == 1:
        payload = migrate_v1(payload, label)
    if payload.get("plan_version") != PLAN_VERSION:
        fail("plan_version", f"unsupported version {payload.get('plan_version')!r}; this polyplan reads 1 and {PLAN_VERSION}")
    for key in ("target", "sampling"):
        if not isinstance(payload.get(key), str) or not payload[key]:
            fail(key, "must be a non-empty string")
    sampling = SamplingMode.parse(payload["sampling"], f"{label}: sampling")
    alternatives = _alternatives(payload.get("alternatives"), payload["target"], label)
    prints = payload.get("fingerprints")
    if not isinstance(prints, dict) or any(name not in prints for name in alternatives[0].chain):
        fail("fingerprints", "must give a fingerprint for every member of the plan's chain (alternatives[0])")
    overhead = payload.get("loop_overhead")
    return PlanFile(
        target=payload["target"],
        sampling=sampling.key,
        alternatives=alternatives,
        device=str(payload.get("device", "")),
        processor=None if payload.get("processor") is None else processor_from_json(payload["processor"], f"{label}: processor"),
        profiled_fingerprints={str(name): str(value) for name, value in prints.items()},
        profile=_profile_record(payload.get("profile")),
        candidates=_candidates_record(payload.get("candidates")),
        loop_overhead=None if overhead is None else overhead_from_json(overhead, f"{label}: loop_overhead"),
        switch_costs=_switch_costs(payload.get("switch_costs", {}), label),
        search=_search_record(payload.get("search")),
        warnings=tuple(line for line in _list(payload.get("warnings")) if isinstance(line, str)),
        insertions=tuple(line for line in _list(payload.get("insertions")) if isinstance(line, str)),
        prediction_intervals=_intervals_record(payload.get("prediction_intervals")),
        physical_limit=_limit_record(payload.get("physical_limit")),
        insertion_triples=tuple(record for item in _list(payload.get("insertion_triples"))
                                if (record := _triple_record(item)) is not None),
        self_check=_self_check_record(payload.get("self_check")),
    )


_V1_HEADLINE = ("chain", "block_sizes", "verify_widths", "predicted", "paper")  # the first chain again
_V1_REPEATED = ("exact_speedup", "paper_speedup", "acceptances")  # each entry's exact/paper again
_EDITED = "the plan was edited; refused, re-run polyplan recommend"


def migrate_v1(payload: dict[str, Any], label: str = "plan.json") -> dict[str, Any]:
    """The version-2 object of a version-1 plan: its headline fields, which repeated the first
    ranked chain, are dropped once they agree with it (a plan whose headline disagrees was
    edited: `PolyplanError`); so are each entry's repeated speedups and acceptances;
    `theorem_3_2` is called `insertion_verdicts`."""
    entries = payload.get("alternatives")
    if not isinstance(entries, list) or not entries or not isinstance(entries[0], dict):
        raise PolyplanError(f"{label}: alternatives: must be a non-empty list of ranked chains")
    first = entries[0]
    chain, blocks = payload.get("chain"), payload.get("block_sizes")
    if chain != first.get("chain") or blocks != first.get("block_sizes"):
        raise PolyplanError(
            f"{label}: chain {chain} with block_sizes {blocks} is not its first ranked chain "
            f"({first.get('chain')}, {first.get('block_sizes')}): {_EDITED}"
        )
    for section, ranked in (("predicted", first.get("exact")), ("paper", first.get("paper"))):
        recorded = payload[section].get("speedup") if isinstance(payload.get(section), dict) else None
        expected = ranked.get("speedup") if isinstance(ranked, dict) else None
        if not is_finite_number(recorded) or not is_finite_number(expected):
            raise PolyplanError(f"{label}: {section}.speedup: must be a finite number > 0, got {recorded!r}")
        if not math.isclose(recorded, expected, rel_tol=1e-6, abs_tol=1e-12):
            raise PolyplanError(
                f"{label}: {section}.speedup {recorded:g} differs from its first ranked chain's {expected:g}: {_EDITED}"
            )
    migrated = {key: value for key, value in payload.items() if key not in _V1_HEADLINE}
    migrated["plan_version"] = 2
    migrated["alternatives"] = [_migrated_entry(entry) for entry in entries]
    return migrated


def _migrated_entry(entry: Any) -> Any:
    if not isinstance(entry, dict):
        return entry
    migrated = {key: value for key, value in entry.items() if key not in _V1_REPEATED and key != "theorem_3_2"}
    if "theorem_3_2" in entry:
        migrated["insertion_verdicts"] = entry["theorem_3_2"]
    return migrated


# The records below were read leniently before they were typed (a missing or malformed one
# meant "not recorded"); they still are, so an older or hand-trimmed plan keeps working.


def _list(value: Any) -> list:
    """`value` when it is a list, else [] (a malformed optional list reads as not recorded)."""
    return value if isinstance(value, list) else []


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _profile_record(value: Any) -> ProfileRecord:
    if not isinstance(value, dict):
        return ProfileRecord()
    return ProfileRecord(_text(value.get("path")), _whole(value.get("schema_version")), _text(value.get("digest")))


def _candidates_record(value: Any) -> CandidatesRecord | None:
    if not isinstance(value, dict):
        return None
    return CandidatesRecord(_text(value.get("path")), value.get("yaml"), _text(value.get("device")))


def _search_record(value: Any) -> SearchRecord:
    if not isinstance(value, dict):
        return SearchRecord()
    return SearchRecord(
        _whole(value.get("max_levels")), _whole(value.get("k_max")), _text(value.get("method")),
        _whole(value.get("context_length")), _text(value.get("acceptance_model")),
    )


def _number(value: Any) -> float | None:
    return float(value) if is_finite_number(value) else None


def _intervals_record(value: Any) -> IntervalsRecord | None:
    if not isinstance(value, dict):
        return None
    tied = value.get("tied_with_best")
    return IntervalsRecord(
        _number(value.get("level")), _whole(value.get("resamples")), _whole(value.get("seed")),
        _text(value.get("latency_source")), _text(value.get("acceptance_source")),
        tuple(tuple(chain) for chain in tied if isinstance(chain, list)) if isinstance(tied, list) else (),
        _text(value.get("ranking")),
        tuple(line for line in widened if isinstance(line, str)) if isinstance(widened := value.get("widened"), list) else (),
        stretch if (stretch := _number(value.get("prompt_stretch"))) is not None and stretch >= 1.0 else 1.0,
    )


def _limit_record(value: Any) -> LimitRecord | None:
    if not isinstance(value, dict):
        return None
    speedup, block, measured = _number(value.get("speedup")), _whole(value.get("block_size")), _whole(value.get("measured_block_size"))
    if speedup is None or block is None or measured is None:
        return None
    interval = _lenient_numbers(value.get("interval"), 2)
    speedups = value.get("speedups")
    return LimitRecord(speedup, block, measured, _lenient_numbers(speedups, len(speedups) if isinstance(speedups, list) else 0),
                       None if not interval or interval[0] > interval[1] else (interval[0], interval[1]))


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _condition_record(value: Any) -> ConditionRecord | None:
    if not isinstance(value, dict) or _number(value.get("lhs")) is None:
        return None
    return ConditionRecord(_number(value["lhs"]), _number(value.get("rhs")), _flag(value.get("holds")))


def _chain_speed_record(value: Any) -> ChainSpeedRecord | None:
    if not isinstance(value, dict):
        return None
    chain, blocks, speedup = value.get("chain"), value.get("block_sizes"), _number(value.get("exact_speedup"))
    if not isinstance(chain, list) or not all(isinstance(name, str) for name in chain) or speedup is None:
        return None
    if not isinstance(blocks, list) or any(_whole(k) is None for k in blocks):
        return None
    return ChainSpeedRecord(tuple(chain), tuple(blocks), speedup)


def _triple_record(value: Any) -> TripleRecord | None:
    """One insertion triple, or None when malformed (it is read for people and reports only)."""
    if not isinstance(value, dict):
        return None
    names = [_text(value.get(key)) for key in ("upper", "middle", "lower")]
    parts = (_chain_speed_record(value.get("with")), _chain_speed_record(value.get("without")),
             _condition_record(value.get("condition1")), _condition_record(value.get("condition2")))
    flags = (_flag(value.get("assumptions_hold")), _flag(value.get("theorem_guarantees_gain")))
    difference, line = _number(value.get("lemma31_difference_s")), _text(value.get("line"))
    if None in names or None in parts or None in flags or difference is None or line is None:
        return None
    return TripleRecord(*names, *parts, *flags, difference, line)


def _switch_costs(value: Any, label: str) -> dict[str, SwitchCost]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PolyplanError(f"{label}: switch_costs: must map model names to seconds")
    return {str(name): switch_cost(cost, f"{label}: switch_costs.{name}") for name, cost in value.items()}


def _numbers(value: Any, length: int, where: str) -> tuple[float, ...]:
    if not isinstance(value, list) or len(value) != length:
        raise PolyplanError(f"{where}: must list {length} numbers")
    for item in value:
        if not is_finite_number(item):
            raise PolyplanError(f"{where}: must hold finite numbers, got {item!r}")
    return tuple(float(item) for item in value)


def _alternatives(entries: Any, target: str, label: str) -> tuple[PlannedChain, ...]:
    """The plan's ranked chains (best first) with both models' predictions."""
    if not isinstance(entries, list) or not entries:
        raise PolyplanError(f"{label}: alternatives: must be a non-empty list of ranked chains")
    chains = []
    for index, entry in enumerate(entries):
        where = f"{label}: alternatives[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("exact"), dict) or not isinstance(entry.get("paper"), dict):
            raise PolyplanError(f"{where}: no predictions recorded (a plan from an older polyplan?); re-run polyplan recommend")
        chain = entry.get("chain")
        if not isinstance(chain, list) or not chain or not all(isinstance(name, str) for name in chain) or chain[0] != target:
            raise PolyplanError(f"{where}.chain: must be a list of model names starting with the target {target!r}")
        blocks = entry.get("block_sizes")
        if not isinstance(blocks, list) or len(blocks) != len(chain) - 1 or not all(
            isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in blocks
        ):
            raise PolyplanError(f"{where}.block_sizes: must list {len(chain) - 1} integers >= 1")
        exact, paper = entry["exact"], entry["paper"]
        levels = len(chain) - 1
        speeds = _numbers([exact.get("speedup"), paper.get("speedup")], 2, f"{where}: speedups")
        if min(speeds) <= 0:
            raise PolyplanError(f"{where}: speedups: must be > 0, got {list(speeds)}")
        chains.append(
            PlannedChain(
                chain=tuple(chain),
                block_sizes=tuple(blocks),
                exact_speedup=speeds[0],
                paper_speedup=speeds[1],
                acceptances=_numbers(exact.get("acceptances"), levels, f"{where}.exact.acceptances"),
                forwards_per_token=_numbers(exact.get("forwards_per_token"), len(chain), f"{where}.exact.forwards_per_token"),
                tokens_per_verification=_numbers(
                    exact.get("tokens_per_verification"), levels, f"{where}.exact.tokens_per_verification"
                ),
                drafted_per_verification=_numbers(
                    exact.get("drafted_per_verification"), levels, f"{where}.exact.drafted_per_verification"
                ),
                time_per_token_s=_numbers(exact.get("time_per_token_s"), len(chain), f"{where}.exact.time_per_token_s"),
                paper_phi_per_token=_numbers(paper.get("phi_per_token"), len(chain), f"{where}.paper.phi_per_token"),
                paper_mean_lengths=_numbers(paper.get("mean_lengths"), levels, f"{where}.paper.mean_lengths"),
                overhead_per_token_s=_numbers([exact.get("overhead_per_token_s", 0.0)], 1, f"{where}.exact.overhead_per_token_s")[0],
                exact_interval=None if exact.get("interval") is None
                else _interval(_numbers(exact["interval"], 2, f"{where}.exact.interval"), f"{where}.exact.interval"),
                verify_widths=_verify_widths(entry.get("verify_widths"), levels, f"{where}.verify_widths"),
                cost_per_token_s=_number(exact.get("cost_per_token_s")),
                wasted_per_verification=_lenient_numbers(exact.get("wasted_per_verification"), levels),
                paper_time_per_token_s=_number(paper.get("time_per_token_s")),
                paper_length_sources=tuple(text for text in _list(paper.get("length_sources")) if isinstance(text, str)),
                paper_alpha_scale=_number(paper.get("alpha_scale")),
                insertion_verdicts=tuple(
                    (item["model"], item["verdict"]) for item in _list(entry.get("insertion_verdicts"))
                    if isinstance(item, dict) and isinstance(item.get("model"), str) and isinstance(item.get("verdict"), str)
                ),
                check=None if entry.get("check") is None else _chain_check(entry["check"], f"{where}.check"),
            )
        )
    return tuple(chains)


def _chain_check(value: Any, where: str) -> ChainCheck:
    """A chain's self-check record; strict: it changes what the plan predicts."""
    if not isinstance(value, dict):
        raise PolyplanError(f"{where}: must be a JSON object")
    terms = _numbers([value.get("composition"), value.get("composition_low"), value.get("composition_high"),
                      value.get("speedup")], 4, where)
    if min(terms) <= 0:
        raise PolyplanError(f"{where}: composition and speedup must be > 0, got {list(terms)}")
    measured = value.get("measured")
    return ChainCheck(
        composition=terms[0], composition_low=terms[1], composition_high=terms[2], speedup=terms[3],
        interval=None if value.get("interval") is None
        else _interval(_numbers(value["interval"], 2, f"{where}.interval"), f"{where}.interval"),
        measured=None if measured is None else _numbers([measured], 1, f"{where}.measured")[0],
        pooled=bool(value.get("pooled", False)),
    )


def _self_check_record(value: Any) -> SelfCheckRecord | None:
    """The plan's self-check record, read for people (lenient: None when absent or malformed)."""
    if not isinstance(value, dict):
        return None
    return SelfCheckRecord(
        prompts=_whole(value.get("prompts")) or 0, new_tokens=_whole(value.get("new_tokens")) or 0,
        repeats=_whole(value.get("repeats")) or 0, seconds=_number(value.get("seconds")) or 0.0,
        checked=tuple(tuple(chain) for chain in _list(value.get("checked"))
                      if isinstance(chain, list) and all(isinstance(name, str) for name in chain)),
        skipped=_text(value.get("skipped")),
    )


def _lenient_numbers(value: Any, length: int) -> tuple[float, ...]:
    """Numbers read for people only: () when absent or malformed (older plans)."""
    if not isinstance(value, list) or len(value) != length or not all(is_finite_number(item) for item in value):
        return ()
    return tuple(float(item) for item in value)


def _verify_widths(value: Any, levels: int, where: str) -> tuple[VerifyWidths, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) != levels:
        raise PolyplanError(f"{where}: must list {levels} width maps (one per verifying level)")
    return tuple(verify_widths_from_json(item, f"{where}[{index}]") for index, item in enumerate(value))


def _interval(values: tuple[float, ...], where: str) -> tuple[float, float]:
    low, high = values
    if low > high:
        raise PolyplanError(f"{where}: low {low:g} is above high {high:g}")
    return low, high
