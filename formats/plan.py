"""plan.json: what `polyplan recommend` writes and `validate`, `export`, `bench` and the decoder read
(its types and its reader; `planner.plan_builder` holds the math that builds one).

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
          "draft_policy": {"k_min": 1, "k_max": 8},   # optional (absent: the last level drafts a fixed
                                             # K_{n-1}): an adaptive cap from K_{n-1} and/or a
                                             # confidence stop {"p_min": 0.7} (DraftPolicy)
          "exact": {                         # the exact model (planner.exact.cost_model)
            "speedup": 2.32, "cost_per_token_s": 0.0107,
            "forwards_per_token": [...], "time_per_token_s": [...],
            "tokens_per_verification": [...], "drafted_per_verification": [...],
            "wasted_per_verification": [...], "acceptances": [...], "overhead_per_token_s": ...,
            "interval": [2.18, 2.41],        # optional: bootstrap interval of "speedup" for a new
                                             # prompt set of the profile's size (two draws)
            "workload_interval": [2.22, 2.37]  # optional: for the workload's mean (one draw)
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

Every key is written (null where there is no value) but for the optional records marked so
above; a field added within version 2 has a default, so a plan written before it still reads.
An unknown key is an error naming the file and the field.

A version-1 plan (polyplan before plan version 2) still reads: `decode_plan` migrates it on
read (`migrate_v1`). Version 1 repeated the first chain at the top level (`chain`,
`block_sizes`, `verify_widths`, `predicted`, `paper`) and its predicted speedups in each
entry (`exact_speedup`, `paper_speedup`, `acceptances`), and called the verdicts
`theorem_3_2`; a version-1 plan whose top level disagrees with its first chain was edited
and is refused.

The records are frozen; `formats.codec` reads and writes them from their field types and the
checks in their metadata: `write_plan` writes a `PlanFile`, `read_plan` reads one (every field
a consumer reads, validated once, each failure one `PolyplanError` naming the file and the
field); `planner.plan_builder.plan_of` builds one from the planner's `Recommendation`. A ranked
chain (`PlannedChain`) nests the exact model's predictions (`ExactRecord`) and Lemma 3.1's
(`PaperRecord`) as the file does.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from polyplan.formats.checks import at_least, each, interval_in, mode_key, non_empty, non_negative, one_of, positive, text, whole
from polyplan.formats.codec import NONE, Before, FileFormat, Invalid, Layout, decode_file, encode_file, read_file, spec, write_file
from polyplan.formats.errors import PolyplanError
from polyplan.formats.inputs import is_finite_number
from polyplan.formats.overhead import LoopOverhead, SwitchCost
from polyplan.formats.processor import Processor

PLAN_VERSION = 2


def _pads_problem(pads: tuple[tuple[int, int], ...]) -> str | None:
    ks = [k for k, _ in pads]
    if any(b <= a for a, b in zip(ks, ks[1:])):
        return f"k values must increase, got {ks}"
    for k, width in pads:
        if isinstance(k, bool) or isinstance(width, bool) or not isinstance(k, int) or not isinstance(width, int):
            return f"({k!r}, {width!r}) must be integers"
        if not 1 <= k < width:
            return f"width {width} for {k} tokens must be larger than {k} >= 1"
    return None


def _pads(pads: tuple[tuple[int, int], ...]) -> None:
    problem = _pads_problem(pads)
    if problem is not None:
        raise Invalid(problem)


@dataclass(frozen=True)
class VerifyWidths:
    """At which width a verification pass over k tokens runs: `pads` lists (k, width) with
    width > k, k increasing; every other k runs at width k. In the file: [[k, width], …]."""

    layout = Layout(transparent=True)

    pads: tuple[tuple[int, int], ...] = spec(_pads, default=())

    def __post_init__(self) -> None:
        problem = _pads_problem(self.pads)
        if problem is not None:
            raise PolyplanError(f"verify_widths: {problem}")

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


def _policy_problem(policy: DraftPolicy) -> str | None:
    """What is wrong with a draft policy's values (None: nothing)."""
    k_min, k_max, p_min = policy.k_min, policy.k_max, policy.p_min
    if (k_min is None) != (k_max is None):
        return f"k_min and k_max go together (an adaptive cap needs both), got k_min={k_min!r}, k_max={k_max!r}"
    for name, value in (("k_min", k_min), ("k_max", k_max)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            return f"{name} must be an integer >= 1, got {value!r}"
    if k_min is not None and k_min > k_max:
        return f"k_min {k_min} is above k_max {k_max}"
    if p_min is not None and (isinstance(p_min, bool) or not isinstance(p_min, (int, float)) or not 0.0 < p_min < 1.0):
        return f"p_min must be a number in (0, 1), got {p_min!r}"
    return None


def _policy_values(policy: DraftPolicy) -> None:
    problem = _policy_problem(policy)
    if problem is not None:
        raise Invalid(problem)


@dataclass(frozen=True)
class DraftPolicy:
    """How the last member of a chain chooses how many tokens to draft per round, beyond the
    fixed block size K of its level (the default, which a plan does not write).

    - Adaptive cap (`k_min`, `k_max`): the cap starts at the level's K and follows the prompt's
      own acceptance, as HF transformers' assistant "heuristic" schedule does
      (`AssistedCandidateGenerator.update_candidate_strategy`): +2 after a round whose every
      drafted token was accepted, −1 after any other, kept within [k_min, k_max]. It restarts at
      K with every generation, so a round's length depends only on the rounds before it.
    - Confidence stop (`p_min`, model drafters only): the drafter stops when its top probability
      (softmax of its logits at temperature 1; the sampling distribution's top at a temperature)
      at the next position is below p_min, and that token is not drafted, as llama.cpp's
      `common_speculative_impl_draft_simple::draft` does (`--spec-draft-p-min`; llama.cpp reads the top
      probability renormalised over its 10 best candidates, polyplan over the whole vocabulary).

    Both depend on the drafter's own context and the rounds already verified, never on the
    verifier's view of the tokens being drafted, so the chain stays lossless. In the file:
    `{"k_min": 1, "k_max": 8}` and/or `{"p_min": 0.7}`."""

    layout = Layout(omit=NONE, checks=(_policy_values,))

    k_min: int | None = None
    k_max: int | None = None
    p_min: float | None = None

    def __post_init__(self) -> None:
        problem = _policy_problem(self)
        if problem is not None:
            raise PolyplanError(f"draft policy: {problem}")

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
    """What the exact model (`planner.exact.cost_model`) predicts for a chain: its speedup (and
    bootstrap interval, `planner.intervals.prediction_interval`; None: not made), seconds per emitted
    token, forward passes and seconds in each model's forwards per token (models M_1 first),
    and per verifying level the tokens emitted, handed up and wasted per verification and the
    acceptance rate α_{i,i+1}; the loop overhead per token it included (0 when none)."""

    speedup: float = spec(positive)
    cost_per_token_s: float | None = None  # None in plans that lack it
    forwards_per_token: tuple[float, ...]
    time_per_token_s: tuple[float, ...]
    tokens_per_verification: tuple[float, ...]
    drafted_per_verification: tuple[float, ...]  # E[m], tokens handed up per verification
    wasted_per_verification: tuple[float, ...] = ()  # drafted tokens rejected; () in plans that lack it
    acceptances: tuple[float, ...]
    overhead_per_token_s: float = 0.0
    interval: tuple[float, float] | None = spec(interval_in(), default=None, omit=NONE)
    # for the workload's mean (one prompt draw; `interval` is for a new prompt set of the profile's size)
    workload_interval: tuple[float, float] | None = spec(interval_in(), default=None, omit=NONE)


@dataclass(frozen=True, kw_only=True)
class PaperRecord:
    """What Lemma 3.1 (`planner.paper.paper_model`) predicts for a chain: its speedup, T / N, φ_i / N
    per model, E[L_i] per verifying level and where each came from ("decoded" or "eq3"), and
    the scale applied to α (None / () in plans that lack them)."""

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
    """recommend's self-check of one chain (`validation.self_check`): the composition term C, the
    exact model's error on this machine (its speedup on the check's own prompts over the measured
    one, or, in `SelfCheckRecord.priced` "plan", on time per token with acceptance as measured), from a
    short run of the chain beside target-only decoding; the prediction it gives, exact / C,
    and that prediction's interval (the exact interval widened by C's).

    pooled: C was not measured on this chain but taken from the chains that were (their
    median, its interval spanning theirs)."""

    layout = Layout(checks=(_positive_terms,))

    composition: float
    composition_low: float
    composition_high: float
    speedup: float
    interval: tuple[float, float] | None = spec(interval_in())
    measured: float | None  # the paired speedup the check measured on this chain (None: pooled)
    pooled: bool = False
    workload_interval: tuple[float, float] | None = spec(interval_in(), default=None, omit=NONE)  # the exact one's, widened by C's


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
    # per verifying level, the padded widths the exact model assumed (planner.exact.verify_width);
    # () in a plan from before they were recorded: the decoder then never pads
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
    # every replicate's deviation stretched for few prompts (1.0 in older plans)
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
    """The profile a plan was made from: its path, schema version and digest (`planner.plan_check`)."""

    path: str | None = None
    schema_version: int | None = None
    digest: str | None = spec(default=None, omit=NONE)


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
    skipped: str | None = None  # why it did not run (then the intervals ignore the model's own error)
    # the time it was allowed (a share of the profile's measuring time) and what the plan's own
    # predictions said its run would take at the size it chose (None: no budget was set)
    budget_s: float | None = spec(non_negative, default=None, omit=NONE)
    estimated_s: float | None = spec(non_negative, default=None, omit=NONE)
    # what C's predicted side is: the exact model on each check prompt (PRICED_BY_PROMPT), or the
    # plan's seconds per pass at the passes the check measured (PRICED_BY_PLAN; None: plans before)
    priced: str | None = spec(one_of(PRICED_BY_PROMPT, PRICED_BY_PLAN), default=None, omit=NONE)


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


# --------------------------------------------------------------------------- the file

PLAN = FileFormat(kind="plan", record=PlanFile, version_key="plan_version", version=PLAN_VERSION,
                  migrations={1: migrate_v1}, advice="upgrade polyplan or re-run polyplan recommend")


def encode_plan(plan: PlanFile) -> dict[str, Any]:
    """The plan.json object of `plan` (the layout in the module docstring)."""
    return encode_file(PLAN, plan)


def decode_plan(payload: Any, label: str = "plan.json") -> PlanFile:
    """The `PlanFile` of a parsed plan.json object (errors name `label` and the field)."""
    return decode_file(PLAN, payload, label)


def read_plan(path: str | os.PathLike[str]) -> PlanFile:
    """Read and check plan.json; `PolyplanError` naming the file and field on any problem."""
    return read_file(PLAN, path)


def write_plan(plan: PlanFile, path: str | os.PathLike[str]) -> None:
    """Write plan.json atomically (temporary file in the same folder, then os.replace)."""
    write_file(PLAN, plan, path)
