"""plan.json: what `polyplan recommend` writes and `validate`, `export`, `bench` and the decoder read
(`planner.plan_builder` builds one). Its layout, key by key: docs/cost-model.md, "plan.json".

`read_plan` validates every field a consumer reads once, each failure one `PolyplanError` naming
the file and the field; a version-1 plan is migrated on read (`migrate_v1`), and a field added
within version 2 has a default, so a plan written before it still reads.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from polyplan.formats.checks import at_least, each, interval_in, mode_key, non_empty, non_negative, one_of, positive, text, whole
from polyplan.formats.codec import EMPTY, NONE, Before, FileFormat, Invalid, Layout, decode_file, encode_file, read_file, spec, write_file
from polyplan.formats.errors import PolyplanError
from polyplan.formats.inputs import is_finite_number
from polyplan.formats.overhead import LoopOverhead, SwitchCost
from polyplan.formats.processor import Processor

_PLAN_VERSION = 2


def _pads(pads: tuple[tuple[int, int], ...]) -> None:
    ks = [k for k, _ in pads]
    if any(b <= a for a, b in zip(ks, ks[1:])):
        raise Invalid(f"k values must increase, got {ks}")
    for k, width in pads:
        if isinstance(k, bool) or isinstance(width, bool) or not isinstance(k, int) or not isinstance(width, int):
            raise Invalid(f"({k!r}, {width!r}) must be integers")
        if not 1 <= k < width:
            raise Invalid(f"width {width} for {k} tokens must be larger than {k} >= 1")


@dataclass(frozen=True)
class VerifyWidths:
    """At which width a verification pass over k tokens runs: `pads` lists (k, width) with
    width > k, k increasing; every other k runs at width k. In the file: [[k, width], …]."""

    layout = Layout(transparent=True)

    pads: tuple[tuple[int, int], ...] = spec(_pads, default=())

    def __post_init__(self) -> None:
        try:
            _pads(self.pads)
        except Invalid as invalid:
            raise PolyplanError(f"verify_widths: {invalid.problem}") from None

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


NO_PADDING = VerifyWidths()


CAP_GROWTH, CAP_SHRINK = 2, 1  # the adaptive cap's steps (HF transformers' "heuristic" assistant schedule)


@dataclass(frozen=True)
class DraftPolicy:
    """How the last member of a chain chooses how many tokens to draft per round instead of its
    level's fixed K (None in a plan): an adaptive cap (`k_min`, `k_max`) and/or a confidence stop
    (`p_min`, model drafters only). Both read only the drafter's own context and the rounds already
    verified, so the chain stays lossless (docs/cost-model.md, "Draft lengths that adapt")."""

    layout = Layout(omit=NONE)  # a policy's values are checked once, by __post_init__, when decoded too

    k_min: int | None = None
    k_max: int | None = None
    p_min: float | None = None

    def __post_init__(self) -> None:
        k_min, k_max, p_min = self.k_min, self.k_max, self.p_min
        if (k_min is None) != (k_max is None):
            raise PolyplanError(f"draft policy: k_min and k_max go together (an adaptive cap needs both), got k_min={k_min!r}, "
                                f"k_max={k_max!r}")
        for name, value in (("k_min", k_min), ("k_max", k_max)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise PolyplanError(f"draft policy: {name} must be an integer >= 1, got {value!r}")
        if k_min is not None and k_min > k_max:
            raise PolyplanError(f"draft policy: k_min {k_min} is above k_max {k_max}")
        if p_min is not None and (isinstance(p_min, bool) or not isinstance(p_min, (int, float)) or not 0.0 < p_min < 1.0):
            raise PolyplanError(f"draft policy: p_min must be a number in (0, 1), got {p_min!r}")

    @property
    def adaptive(self) -> bool:
        """Whether the cap moves (an adaptive cap is set)."""
        return self.k_min is not None

    def next_cap(self, cap: int, drafted: int, accepted: int) -> int:
        """The cap of the next round after a round that drafted `drafted` tokens under `cap`
        and had `accepted` of them accepted (`cap` itself when the cap does not adapt)."""
        if self.k_min is None or self.k_max is None:
            return cap
        moved = cap + CAP_GROWTH if accepted == drafted else cap - CAP_SHRINK
        return min(self.k_max, max(self.k_min, moved))

    def widest(self, block: int) -> int:
        """The most tokens one round can draft when the level's block size is `block`."""
        return self.k_max if self.k_max is not None else block

    def check_block(self, block: int, what: str = "block size") -> None:
        """An adaptive cap starts at the level's block size, which must lie in [k_min, k_max]."""
        if self.k_min is not None and self.k_max is not None and not self.k_min <= block <= self.k_max:
            raise PolyplanError(f"draft policy: the {what} {block} must lie in [k_min, k_max] = [{self.k_min}, {self.k_max}]")

    def label(self, block: int) -> str:
        """How `recommend` prints the last level's block size with this policy: `3 adaptive 1..8`,
        `6, p_min 0.7`."""
        text = f"{block} adaptive {self.k_min}..{self.k_max}" if self.adaptive else str(block)
        return text + (f", p_min {self.p_min:g}" if self.p_min is not None else "")


FIXED_DRAFTS = DraftPolicy()  # the fixed block size: what a plan without a policy runs


def blocks_text(block_sizes: tuple[int, ...], policy: DraftPolicy | None) -> str:
    """A chain's block sizes as printed: `[4, 3]`, with the last level's draft policy
    `[4, 3 adaptive 1..8]` or `[6, p_min 0.7]`."""
    if policy is None or policy == FIXED_DRAFTS or not block_sizes:
        return str(list(block_sizes))
    return "[" + ", ".join([str(k) for k in block_sizes[:-1]] + [policy.label(block_sizes[-1])]) + "]"


@dataclass(frozen=True, kw_only=True)
class ExactRecord:
    """What the exact model (`planner.exact.cost_model`) predicts for a chain: per model (M_1 first)
    forward passes and seconds per token; per verifying level tokens emitted, handed up and wasted
    per verification and α_{i,i+1}; the interval is `planner.intervals.prediction_interval`'s."""

    speedup: float = spec(positive)
    cost_per_token_s: float | None = None
    forwards_per_token: tuple[float, ...]
    time_per_token_s: tuple[float, ...]
    tokens_per_verification: tuple[float, ...]
    drafted_per_verification: tuple[float, ...]  # E[m], tokens handed up per verification
    wasted_per_verification: tuple[float, ...] = ()  # drafted tokens rejected
    acceptances: tuple[float, ...]
    overhead_per_token_s: float = 0.0
    interval: tuple[float, float] | None = spec(interval_in(), default=None, omit=NONE)
    # for the workload's mean (one prompt draw; `interval` is for a new prompt set of the profile's size)
    workload_interval: tuple[float, float] | None = spec(interval_in(), default=None, omit=NONE)


@dataclass(frozen=True, kw_only=True)
class PaperRecord:
    """What Lemma 3.1 (`planner.paper.paper_model`) predicts for a chain: T / N, φ_i / N per model,
    E[L_i] per verifying level and its source ("decoded" or "eq3"), the scale applied to α."""

    speedup: float = spec(positive)
    time_per_token_s: float | None = None
    phi_per_token: tuple[float, ...]
    mean_lengths: tuple[float, ...]
    length_sources: tuple[str, ...] = ()
    alpha_scale: float | None = None


@dataclass(frozen=True)
class InsertionVerdict:
    """Theorem 3.2's verdict on an intermediate model of a chain (`planner.paper.insertion`)."""

    model: str
    verdict: str  # "helps" / "no_gain"


def _positive_terms(check: ChainCheck) -> None:
    terms = [check.composition, check.composition_low, check.composition_high, check.speedup]
    if min(terms) <= 0:
        raise Invalid(f"composition and speedup must be > 0, got {terms}")


@dataclass(frozen=True)
class ChainCheck:
    """recommend's self-check of one chain (`validation.self_check`, docs/cost-model.md "The
    self-check"): the composition term C with its interval, the prediction it gives, exact / C,
    and that prediction's interval (the exact interval widened by C's). `pooled`: C was taken from
    the chains that were checked, not measured on this one."""

    layout = Layout(checks=(_positive_terms,))

    composition: float
    composition_low: float
    composition_high: float
    speedup: float
    interval: tuple[float, float] | None = spec(interval_in())
    measured: float | None  # the paired speedup the check measured on this chain (None: pooled)
    pooled: bool = False
    workload_interval: tuple[float, float] | None = spec(interval_in(), default=None, omit=NONE)  # the exact one's, widened by C's
    # C as the check measured it, the share of its log kept after weighing the evidence
    # (validation.shrinkage), and the check's noise (a log standard deviation); None: a plan that did not weigh
    measured_composition: float | None = spec(positive, default=None, omit=NONE)
    weight: float | None = spec(non_negative, default=None, omit=NONE)
    noise: float | None = spec(non_negative, default=None, omit=NONE)


def _levels(planned: PlannedChain) -> None:
    """Each per-model list has a value per model, each per-level list one per verifying level."""
    models, levels = len(planned.chain), len(planned.chain) - 1
    if len(planned.block_sizes) != levels:
        raise Invalid(f"must list {levels} integers >= 1", ".block_sizes")
    if planned.verify_widths and len(planned.verify_widths) != levels:
        raise Invalid(f"must list {levels} width maps (one per verifying level)", ".verify_widths")
    lengths = (
        ("exact", "forwards_per_token", models), ("exact", "time_per_token_s", models),
        ("exact", "tokens_per_verification", levels), ("exact", "drafted_per_verification", levels),
        ("exact", "acceptances", levels), ("paper", "phi_per_token", models), ("paper", "mean_lengths", levels),
    )
    for section, name, length in lengths:
        if len(getattr(getattr(planned, section), name)) != length:
            raise Invalid(f"must list {length} numbers", f".{section}.{name}")
    if planned.exact.wasted_per_verification and len(planned.exact.wasted_per_verification) != levels:
        raise Invalid(f"must list {levels} numbers", ".exact.wasted_per_verification")
    policy = planned.draft_policy
    if policy is not None:
        if levels == 0:
            raise Invalid("a chain of the target alone drafts nothing", ".draft_policy")
        if policy.adaptive and not policy.k_min <= planned.block_sizes[-1] <= policy.k_max:
            raise Invalid(f"the last block size {planned.block_sizes[-1]} must lie in [k_min, k_max] = "
                          f"[{policy.k_min}, {policy.k_max}]", ".draft_policy")


@dataclass(frozen=True, kw_only=True)
class PlannedChain:
    """One ranked chain of a plan with what both models predicted for it (models M_1 first)."""

    layout = Layout(checks=(_levels,))

    chain: tuple[str, ...] = spec(non_empty("model"))
    block_sizes: tuple[int, ...] = spec(each(whole(1)))  # K_1 … K_{n-1}
    # per verifying level, the padded widths the exact model assumed (planner.exact.verify_width; (): never pad)
    verify_widths: tuple[VerifyWidths, ...] = ()
    exact: ExactRecord
    paper: PaperRecord
    # per intermediate model, Theorem 3.2's verdict (planner.paper.insertion)
    insertion_verdicts: tuple[InsertionVerdict, ...] = ()
    check: ChainCheck | None = spec(default=None, omit=NONE)  # recommend's self-check of this chain (None: not checked)
    # how the last member chooses its draft lengths (None: the fixed K_{n-1}, not written)
    draft_policy: DraftPolicy | None = spec(default=None, omit=NONE)

    def label(self) -> str:
        return " > ".join(self.chain)

    def blocks_label(self) -> str:
        """The block sizes with the last level's draft policy (`blocks_text`)."""
        return blocks_text(self.block_sizes, self.draft_policy)

    @property
    def predicted_speedup(self) -> float:
        """What the plan predicts: the exact model, corrected by the self-check where one ran."""
        return self.check.speedup if self.check is not None else self.exact.speedup

    @property
    def predicted_interval(self) -> tuple[float, float] | None:
        """The interval of `predicted_speedup` (the self-check's, widened by its term's uncertainty)."""
        return self.check.interval if self.check is not None else self.exact.interval

    @property
    def workload_interval(self) -> tuple[float, float] | None:
        """The interval of `predicted_speedup` for the workload's mean (one prompt draw), where the plan has it."""
        return self.check.workload_interval if self.check is not None else self.exact.workload_interval


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
    # every replicate's deviation stretched for few prompts (1.0: not stretched)
    prompt_stretch: float = spec(at_least(1.0), default=1.0)


@dataclass(frozen=True)
class LimitRecord:
    """The physical limit the plan was made beside (`planner.exact.physical_limit`)."""

    speedup: float
    block_size: int  # the K reaching it; 0: no K beats the target alone
    measured_block_size: int  # the widest K whose verification width the target was timed at
    speedups: tuple[float, ...]  # S(K) for K = 1 …
    interval: tuple[float, float] | None = spec(interval_in(), default=None, omit=NONE)  # bootstrap interval of `speedup`


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
    with_chain: ChainSpeedRecord = spec(key="with")
    without_chain: ChainSpeedRecord = spec(key="without")
    condition1: ConditionRecord
    condition2: ConditionRecord
    assumptions_hold: bool
    theorem_guarantees_gain: bool
    lemma31_difference_s: float  # Lemma 3.1's eq. 2 − eq. 1 per token (< 0: it helps)
    line: str


@dataclass(frozen=True)
class ProfileRecord:
    """The profile a plan was made from: its path, schema version and digest (`planner.plan_check`);
    for a profile re-priced for another prompt file (`pipeline.reprice`), which prompts its
    acceptance, and so the plan's numbers, are for and the profile its timings were kept from."""

    path: str | None = None
    schema_version: int | None = None
    digest: str | None = spec(default=None, omit=NONE)
    prompt_file: str | None = spec(text, default=None, omit=NONE)
    prompts: int | None = spec(whole(0), default=None, omit=NONE)
    timings_from: str | None = spec(text, default=None, omit=NONE)


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
    # the answer length acceptance was read over (`recommend --new-tokens`); None: all the profile measured
    new_tokens: int | None = spec(whole(1), default=None, omit=NONE)


PRICED_BY_PROMPT = "prompts"  # validation.check_prices
PRICED_BY_PLAN = "plan"


@dataclass(frozen=True)
class SelfCheckRecord:
    """How recommend's self-check ran (`validation.self_check`), or why it did not (`skipped`)."""

    prompts: int = 0
    new_tokens: int = 0
    repeats: int = 0
    seconds: float = 0.0
    checked: tuple[tuple[str, ...], ...] = ()  # the chains run (the rest take the pooled term)
    # chains of the check's usual set left out so that its smallest run fits the budget, lowest ranked first
    left_out: tuple[tuple[str, ...], ...] = spec(default=(), omit=EMPTY)
    skipped: str | None = None  # why it did not run (then the intervals ignore the model's own error)
    # the time it was allowed (a share of the profile's measuring time) and what the plan predicted its run takes
    budget_s: float | None = spec(non_negative, default=None, omit=NONE)
    estimated_s: float | None = spec(non_negative, default=None, omit=NONE)
    # C's predicted side: the exact model on each check prompt, or the plan's seconds per pass at the measured passes
    priced: str | None = spec(one_of(PRICED_BY_PROMPT, PRICED_BY_PLAN), default=None, omit=NONE)
    # the noise of ln C that every prompt of the check shares (validation.self_check.shared_variance, a
    # standard deviation) and the profile's machine floor (IQR/median) it was read from
    shared_noise: float | None = spec(non_negative, default=None, omit=NONE)
    floor: float | None = spec(non_negative, default=None, omit=NONE)


def _predictions_recorded(entry: Any) -> Any:
    """A ranked chain as the first plans wrote it, without its predictions, is refused with the way out."""
    if isinstance(entry, dict) and not {"exact", "paper"} <= set(entry):
        raise Invalid("no predictions recorded (a plan from an older polyplan?); re-run polyplan recommend")
    return entry


def _chains_of_this_target(plan: PlanFile) -> None:
    """Every ranked chain starts with the target, and the plan's chain has its fingerprints."""
    for index, planned in enumerate(plan.alternatives):
        if planned.chain[0] != plan.target:
            raise Invalid(f"must be a list of model names starting with the target {plan.target!r}", f".alternatives[{index}].chain")
    if any(name not in plan.profiled_fingerprints for name in plan.best.chain):
        raise Invalid("must give a fingerprint for every member of the plan's chain (alternatives[0])", ".fingerprints")


@dataclass(frozen=True, kw_only=True)
class PlanFile:
    """What plan.json holds, validated once by `read_plan`. The plan's own chain is its best
    ranked chain, `best` (`alternatives[0]`); `chain`, `block_sizes` and `fingerprints` are
    that chain's."""

    layout = Layout(checks=(_chains_of_this_target,))

    target: str = spec(text)
    device: str = ""
    processor: Processor | None = None  # where the profile's timings were taken (None: not recorded)
    sampling: str = spec(mode_key)  # a `formats.sampling.SamplingMode` key
    # of every profiled model (what `validate` checks the candidates against)
    profiled_fingerprints: Mapping[str, str] = spec(key="fingerprints")
    profile: ProfileRecord = ProfileRecord()
    candidates: CandidatesRecord | None = None
    loop_overhead: LoopOverhead | None = None
    switch_costs: Mapping[str, SwitchCost] = spec(factory=dict)
    # every ranked chain, best first
    alternatives: tuple[Annotated[PlannedChain, Before(_predictions_recorded)], ...] = spec(non_empty("ranked chain"))
    insertions: tuple[str, ...] = ()  # why each model is in or out (planner.search)
    prediction_intervals: IntervalsRecord | None = None
    warnings: tuple[str, ...] = ()
    search: SearchRecord = SearchRecord()
    physical_limit: LimitRecord | None = None
    insertion_triples: tuple[TripleRecord, ...] = ()
    # recommend's self-check (None: none ran; `skipped` says why when asked)
    self_check: SelfCheckRecord | None = spec(default=None, omit=NONE)

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


# --------------------------------------------------------------------------- version 1


_V1_HEADLINE = ("chain", "block_sizes", "verify_widths", "predicted", "paper")  # the first chain again
_V1_REPEATED = ("exact_speedup", "paper_speedup", "acceptances")  # each entry's exact/paper again
_EDITED = "the plan was edited; refused, re-run polyplan recommend"


def migrate_v1(payload: dict[str, Any], label: str = "plan.json") -> dict[str, Any]:
    """The version-2 object of a version-1 plan (what changed: docs/cost-model.md, "plan.json"); a
    plan whose headline disagrees with its first ranked chain was edited: `PolyplanError`."""
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


_PLAN = FileFormat(kind="plan", record=PlanFile, version_key="plan_version", version=_PLAN_VERSION,
                  migrations={1: migrate_v1}, advice="upgrade polyplan or re-run polyplan recommend")


def encode_plan(plan: PlanFile) -> dict[str, Any]:
    """The plan.json object of `plan` (its layout: docs/cost-model.md, "plan.json")."""
    return encode_file(_PLAN, plan)


def decode_plan(payload: Any, label: str = "plan.json") -> PlanFile:
    """The `PlanFile` of a parsed plan.json object (errors name `label` and the field)."""
    return decode_file(_PLAN, payload, label)


def read_plan(path: str | os.PathLike[str]) -> PlanFile:
    """Read and check plan.json; `PolyplanError` naming the file and field on any problem."""
    return read_file(_PLAN, path)


def write_plan(plan: PlanFile, path: str | os.PathLike[str]) -> None:
    """Write plan.json atomically (temporary file in the same folder, then os.replace)."""
    write_file(_PLAN, plan, path)
