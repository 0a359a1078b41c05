"""What `polyplan validate` found: measured against predicted, per chain, and the headline
(docs/validation.md, "How it judges").

Pure Python and numpy (no torch): `summarise_chain` and `headline` turn the runs of
`validation.chain_runs` into frozen results; each `ChainResult` keeps what was measured
(`MeasuredChain`) apart from what was predicted (`ChainPredictions`). A chain whose greedy output
differs from target-only decoding is lossy, with no measured speedup, unless every difference is a
near-tie (`validation.numerics`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from polyplan.formats.plan import DraftPolicy, PlannedChain, blocks_text
from polyplan.decoder.result import PassTally
from polyplan.formats.validation_report import (
    AcceptedFraction, ChainCategoryRows, Check, CostSplit, ErrorSources, ForwardsPerToken, HeadlinePrediction, MeasuredExact, OverTwoModel, PassSeconds,
    PromptRecord, ReportHeadline, ReportLevel, ReportSettings, SpeedupErrors, SpeedupRatio, TokensPerVerification,
)
from polyplan.validation.cost_split import LevelCosts, Price, cost_split, mean_width, merged_tallies, profile_seconds_per_pass
from polyplan.validation.paired import PairedSpeedup, paired_speedup, ratio_interval

ROLE_RECOMMENDED = "recommended"
ROLE_ALTERNATIVE = "alternative"
ROLE_TWO_MODEL = "best two-model"
ROLE_TARGET_ONLY = "target only"

PREDICTION_TOLERANCE = 0.10  # the exact model's promise, relative to the measured speedup

# What validate judges of a run (`Headline.checks`), each a fact about the user's own run
CHECK_HOLDS = f"every prediction inside its interval and within {PREDICTION_TOLERANCE:.0%} of its point"
CHECK_FASTEST = "the recommended chain the fastest measured, or tied within the paired CI"
CHECK_GREEDY = "greedy output equal to target-only decoding's, token for token"
CHECK_NO_WORSE = "the self-check made no prediction worse than the exact model's by more than its own stated uncertainty"
# What it reports beside them without judging (`Headline.diagnostics`): the table shows the same errors
DIAGNOSTIC_EXACT = f"exact model within {PREDICTION_TOLERANCE:.0%} of the measured speedup (every lossless chain)"
DIAGNOSTIC_CHECKED = f"checked prediction (recommend's self-check) within {PREDICTION_TOLERANCE:.0%} (every lossless chain)"
DIAGNOSTIC_RETIMED = f"exact model on latency re-timed during the run within {PREDICTION_TOLERANCE:.0%} (every lossless chain)"


@dataclass(frozen=True)
class ChainSpec:
    """A chain to validate: the plan's entry, why it is validated, and its rank in the plan."""

    planned: PlannedChain
    roles: tuple[str, ...]
    rank: int  # 1-based position in the plan's ranking


@dataclass(frozen=True)
class RunRecord:
    """One timed `generate` call of one chain on one prompt in one repeat (members M_1 first)."""

    chain: int  # index into the validated specs
    repeat: int
    prompt: int
    decode_s: float
    prefill_s: float
    token_ids: tuple[int, ...]
    forward_passes: tuple[int, ...]
    forward_seconds: tuple[float, ...]
    tokens_per_verification: tuple[tuple[int, ...], ...]
    tokens_drafted: tuple[int, ...]
    tokens_accepted: tuple[int, ...]
    passes: tuple[tuple[PassTally, ...], ...] = ()  # per member: its passes by width (decoder.result.PassTally)


@dataclass(frozen=True)
class Repeated:
    """A quantity measured once per repeat: the samples, their mean and standard deviation."""

    samples: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples)

    @property
    def std(self) -> float | None:
        """Sample standard deviation over repeats (None with a single repeat)."""
        return statistics.stdev(self.samples) if len(self.samples) > 1 else None


@dataclass(frozen=True)
class MeasuredChain:
    """What a validation run measured of one chain (decoding only where not said otherwise)."""

    greedy_equal: bool | None  # None when sampling (outputs are random; losslessness is tested statistically)
    first_difference: str | None  # where a lossy chain first left the target's output
    speedup: Repeated  # per repeat, over target-only decoding
    end_to_end_speedup: float  # prefill included, over all repeats
    tokens_per_second: float
    seconds_per_token: float
    loop_seconds_per_token: float  # decoding minus time inside forward passes
    paired: PairedSpeedup | None = None  # the paired per-prompt speedup and its CI (validation.paired)
    prompts: tuple[PromptRecord, ...] = ()
    near_tie: str | None = None  # why a chain that parted from target-only decoding is still measured
    baseline_seconds_per_token: float | None = None  # target-only decoding's in the same runs, for `cost_split`

    @property
    def lossless(self) -> bool:
        return self.greedy_equal is not False or self.near_tie is not None

    @property
    def speedup_point(self) -> float | None:
        """The paired per-prompt speedup (else the mean over repeats); None for a lossy chain."""
        if not self.lossless:
            return None
        return self.paired.point if self.paired is not None else self.speedup.mean

    def text(self) -> str:
        """The paired speedup with its CI (or the mean when no CI was computed; LOSSY for a lossy chain)."""
        if not self.lossless:
            return "LOSSY"
        return self.paired.text() if self.paired is not None else f"{self.speedup.mean:.2f}x"


@dataclass(frozen=True)
class ChainPredictions:
    """What was predicted for one chain: the plan's speedups, and the exact model again on what the run measured."""

    exact: float
    paper: float  # Lemma 3.1
    interval: tuple[float, float] | None  # the plan's interval of `exact`
    loop_seconds_per_token: float  # the exact model's
    checked: float | None = None  # recommend's self-check: exact / C (formats.plan.ChainCheck); None: not checked
    checked_interval: tuple[float, float] | None = None
    retimed: float | None = None  # the exact model on latency timed during this run (validation.retime)
    # the exact model on re-timed latency and on acceptance measured on the validation prompts (greedy)
    reaccepted: float | None = None
    baseline_seconds_per_token: float | None = None  # the plan's, of target-only decoding, for `cost_split`
    composition: float | None = None  # the self-check's C (formats.plan.ChainCheck); None: not checked
    composition_interval: tuple[float, float] | None = None  # C's interval

    @property
    def check_uncertainty(self) -> float | None:
        """The self-check's own stated uncertainty, relative: the half-width of C's log interval,
        max(ln(C / low), ln(high / C)); None without a check."""
        if self.composition is None or self.composition_interval is None:
            return None
        low, high = self.composition_interval
        return max(math.log(self.composition / low), math.log(high / self.composition))

    @property
    def judged(self) -> tuple[float, tuple[float, float] | None]:
        """The prediction the plan stands by, with its interval: the self-check's, else the exact model's."""
        if self.checked is not None:
            return self.checked, self.checked_interval
        return self.exact, self.interval

    def text(self) -> str:
        """The exact model's point with its interval (the point alone when the plan has none)."""
        return _speedup_text(self.exact, self.interval)

    def checked_text(self) -> str:
        """The checked prediction with its interval, or - when the plan ran no self-check."""
        return "-" if self.checked is None else _speedup_text(self.checked, self.checked_interval)

    def judged_text(self) -> str:
        """The prediction the plan stands by with its interval, `(checked)` when it is the self-check's."""
        return f"{self.checked_text()} (checked)" if self.checked is not None else self.text()


@dataclass(frozen=True)
class ChainResult:
    """One validated chain: what was measured next to what was predicted."""

    chain: tuple[str, ...]
    block_sizes: tuple[int, ...]
    roles: tuple[str, ...]
    rank: int
    levels: tuple[ReportLevel, ...]  # measured next to both models' predictions, as report.json keeps them
    measured: MeasuredChain
    predicted: ChainPredictions
    draft_policy: DraftPolicy | None = None  # the last level's draft lengths (None: a fixed K)

    @property
    def recommended(self) -> bool:
        return ROLE_RECOMMENDED in self.roles

    @property
    def lossless(self) -> bool:
        return self.measured.lossless

    @property
    def measured_speedup(self) -> float | None:
        """`MeasuredChain.speedup_point`: None for a lossy chain."""
        return self.measured.speedup_point

    @property
    def tokens_per_target_pass(self) -> float:
        """Emitted tokens per forward pass of the target (Spec-Bench's mean accepted tokens)."""
        return 1.0 / self.levels[0].forwards_per_token.measured

    def error_of(self, predicted: float | None) -> float | None:
        """(predicted − measured) / measured; None for a lossy chain or without a prediction."""
        measured = self.measured_speedup
        return None if measured is None or predicted is None else predicted / measured - 1.0

    @property
    def errors(self) -> SpeedupErrors:
        """The exact model's, Lemma 3.1's and the re-timed exact model's errors, as report.json keeps them."""
        return SpeedupErrors(*(self.error_of(value) for value in (self.predicted.exact, self.predicted.paper,
                                                                   self.predicted.retimed)))

    @property
    def checked_error(self) -> float | None:
        return self.error_of(self.predicted.checked)

    @property
    def judged_error(self) -> float | None:
        """The error of the prediction the plan stands by (`ChainPredictions.judged`); None for a lossy chain."""
        return self.error_of(self.predicted.judged[0])

    @property
    def check_worsened_by(self) -> float | None:
        """How much further off the checked prediction is than the exact model, |checked error| −
        |exact error| (negative: the check brought it closer); None without both."""
        checked, exact = self.checked_error, self.errors.exact
        return None if checked is None or exact is None else abs(checked) - abs(exact)

    @property
    def inside_interval(self) -> bool | None:
        """The measured speedup lies inside the `judged` interval (None: no interval, or lossy)."""
        measured, (_, interval) = self.measured_speedup, self.predicted.judged
        if measured is None or interval is None:
            return None
        return interval[0] <= measured <= interval[1]

    @property
    def prediction_holds(self) -> bool | None:
        """Inside the plan's interval and within PREDICTION_TOLERANCE of its point (`judged`)."""
        inside, error = self.inside_interval, self.judged_error
        if inside is None or error is None:
            return None
        return inside and abs(error) <= PREDICTION_TOLERANCE

    @property
    def cost_split(self) -> CostSplit | None:
        """The exact model's error split by the factors of time per token (`validation.cost_split`);
        None for a lossy chain, target-only, or without the plan's baseline."""
        measured, predicted = self.measured, self.predicted
        if self.measured_speedup is None or len(self.chain) == 1 or predicted.baseline_seconds_per_token is None:
            return None
        return cost_split(
            [_level_costs(level) for level in self.levels], loop=measured.loop_seconds_per_token,
            predicted_loop=predicted.loop_seconds_per_token, baseline=measured.baseline_seconds_per_token,
            predicted_baseline=predicted.baseline_seconds_per_token, predicted_speedup=predicted.exact,
            measured_speedup=self.measured_speedup,
        )

    @property
    def error_sources(self) -> ErrorSources | None:
        """The exact model's error split by source (None for a lossy chain or target-only)."""
        measured, predicted = self.measured_speedup, self.predicted
        if measured is None or len(self.chain) == 1:
            return None
        verifications, paired = self.levels[0].tokens_per_verification, self.measured.paired
        retimed, reaccepted = predicted.retimed, predicted.reaccepted
        return ErrorSources(
            total=predicted.exact / measured - 1.0,
            latency=None if retimed is None else predicted.exact / retimed - 1.0,
            after_latency=None if retimed is None else retimed / measured - 1.0,
            acceptance=retimed / reaccepted - 1.0 if retimed is not None and reaccepted is not None else None,
            residual=reaccepted / measured - 1.0 if reaccepted is not None else None,
            tokens_per_pass=verifications.exact / verifications.mu - 1.0
            if verifications is not None and verifications.mu and verifications.exact else None,
            noise=0.0 if paired is None else (paired.high - paired.low) / 2 / measured,
        )

    def label(self) -> str:
        return " > ".join(self.chain)


def _level_costs(level: ReportLevel) -> LevelCosts:
    """A member's factors of the chain's time per token (`validation.cost_split`)."""
    forwards, seconds = level.forwards_per_token, level.seconds_per_token
    return LevelCosts.per_token(forwards.measured, seconds.measured, forwards.exact, seconds.exact)


def _speedup_text(speedup: float, interval: tuple[float, float] | None) -> str:
    """The speedup with its interval in brackets, or alone without one."""
    if interval is None:
        return f"{speedup:.2f}x"
    return f"{speedup:.2f}x [{interval[0]:.2f}, {interval[1]:.2f}]"


@dataclass(frozen=True)
class Headline:
    """The recommended chain's result and how it compares, as report.json keeps it; the checks
    judged on the run, and diagnostics reported beside them without a verdict on the run."""

    record: ReportHeadline
    checks: tuple[Check, ...]
    diagnostics: tuple[Check, ...] = ()

    def find(self, name: str) -> Check | None:
        """The check or diagnostic called `name` (one of this module's CHECK_ and DIAGNOSTIC_ names)."""
        return next((check for check in (*self.checks, *self.diagnostics) if check.name == name), None)


@dataclass(frozen=True)
class Validation:
    """Everything `polyplan validate` measured, with the settings it ran under."""

    chains: tuple[ChainResult, ...]
    headline: Headline
    settings: ReportSettings  # as report.json records them
    notes: tuple[str, ...]
    categories: tuple[ChainCategoryRows, ...] = ()  # per chain but target-only (validation.categories)


def _pooled(values: Sequence[Sequence[int]]) -> tuple[float | None, float | None]:
    flat = [v for group in values for v in group]
    if not flat:
        return None, None
    return statistics.fmean(flat), (statistics.stdev(flat) if len(flat) > 1 else 0.0)


def parting(reference: Sequence[int], other: Sequence[int]) -> int | None:
    """Where `other` first leaves `reference`: the first differing position, or the shorter
    one's length when one is a prefix of the other; None when they are equal."""
    if tuple(reference) == tuple(other):
        return None
    return next((i for i, (a, b) in enumerate(zip(reference, other)) if a != b), min(len(reference), len(other)))


def _first_difference(reference: tuple[int, ...], other: tuple[int, ...], prompt: int, repeat: int) -> str | None:
    position = parting(reference, other)
    if position is None:
        return None
    return f"prompt {prompt + 1}, repeat {repeat + 1}: token {position + 1} differs from target-only decoding"


def summarise_chain(
    spec: ChainSpec, runs: Sequence[RunRecord], baseline: Sequence[RunRecord], greedy: bool, retimed: float | None = None,
    reaccepted: float | None = None, near_tie: str | None = None, *, predicted_baseline: float | None = None,
    price: Price | None = None,
) -> ChainResult:
    """One chain's runs against the target-only runs of the same cells. `retimed`, `reaccepted`: the
    exact model re-evaluated on this run (`ChainPredictions`); `near_tie`: why its greedy
    differences are measured anyway; `predicted_baseline`: the plan's b̂; `price`: the profile's
    T_i(width, context), to price each member's passes at the widths it ran."""
    planned = spec.planned
    base = {(run.repeat, run.prompt): run for run in baseline}
    repeats = sorted({run.repeat for run in runs})
    speedups = []
    for repeat in repeats:
        mine = [run for run in runs if run.repeat == repeat]
        theirs = sum(base[(repeat, run.prompt)].decode_s for run in mine)
        speedups.append(theirs / sum(run.decode_s for run in mine))
    paired, prompts = _paired(runs, base)
    difference = None
    if greedy:
        for run in runs:
            difference = _first_difference(base[(run.repeat, run.prompt)].token_ids, run.token_ids, run.prompt, run.repeat)
            if difference is not None:
                break
    tokens = sum(len(run.token_ids) for run in runs)
    decode = sum(run.decode_s for run in runs)
    inside = sum(sum(run.forward_seconds) for run in runs)
    base_total = sum(base[(run.repeat, run.prompt)].decode_s + base[(run.repeat, run.prompt)].prefill_s for run in runs)
    levels, exact, paper = [], planned.exact, planned.paper
    for i, model in enumerate(planned.chain):
        verifies = i < len(planned.chain) - 1
        mu, sigma = _pooled([run.tokens_per_verification[i] for run in runs]) if verifies else (None, None)
        proposed, accepted = sum(run.tokens_drafted[i] for run in runs), sum(run.tokens_accepted[i] for run in runs)
        passes = sum(run.forward_passes[i] for run in runs)
        tallies = merged_tallies([run.passes[i] for run in runs if run.passes])
        timed = sum(run.forward_seconds[i] for run in runs)
        alpha = exact.acceptances[i] if verifies else None
        levels.append(
            ReportLevel(
                model=model,
                forwards_per_token=ForwardsPerToken(passes / tokens, exact.forwards_per_token[i], paper.phi_per_token[i]),
                seconds_per_token=MeasuredExact(timed / tokens, exact.time_per_token_s[i]),
                tokens_per_verification=None if mu is None
                else TokensPerVerification(mu, sigma, exact.tokens_per_verification[i], paper.mean_lengths[i]),
                accepted_fraction=None if alpha is None else AcceptedFraction(
                    accepted / proposed if proposed else None,
                    (exact.tokens_per_verification[i] - 1.0) / exact.drafted_per_verification[i]  # E[min(A, m)] / E[m]
                    if exact.drafted_per_verification[i] > 0 else None,
                    alpha,
                ),
                tokens_drafted=proposed,
                tokens_accepted=accepted,
                seconds_per_pass=PassSeconds(
                    measured=timed / passes,
                    exact=exact.time_per_token_s[i] / exact.forwards_per_token[i],
                    profile=profile_seconds_per_pass(model, tallies, price) if price is not None else None,
                    mean_width=mean_width(tallies) or 0.0,
                ) if passes and exact.forwards_per_token[i] > 0 else None,
            )
        )
    measured = MeasuredChain(
        greedy_equal=(difference is None) if greedy else None,
        first_difference=difference,
        speedup=Repeated(tuple(speedups)),
        end_to_end_speedup=base_total / sum(run.decode_s + run.prefill_s for run in runs),
        tokens_per_second=tokens / decode,
        seconds_per_token=decode / tokens,
        loop_seconds_per_token=(decode - inside) / tokens,
        paired=paired,
        prompts=prompts,
        near_tie=near_tie if difference is not None else None,
        baseline_seconds_per_token=_seconds_per_token(baseline, runs),
    )
    predicted = ChainPredictions(
        exact=planned.exact.speedup,
        paper=planned.paper.speedup,
        interval=planned.exact.interval,
        loop_seconds_per_token=planned.exact.overhead_per_token_s,
        checked=None if planned.check is None else planned.check.speedup,
        checked_interval=None if planned.check is None else planned.check.interval,
        retimed=retimed,
        reaccepted=reaccepted,
        baseline_seconds_per_token=predicted_baseline,
        composition=None if planned.check is None else planned.check.composition,
        composition_interval=None if planned.check is None else (planned.check.composition_low, planned.check.composition_high),
    )
    return ChainResult(planned.chain, planned.block_sizes, spec.roles, spec.rank, tuple(levels), measured, predicted,
                       planned.draft_policy)


def _seconds_per_token(baseline: Sequence[RunRecord], runs: Sequence[RunRecord]) -> float:
    """Target-only decoding's seconds per token over the (repeat, prompt) cells of `runs`."""
    cells = {(run.repeat, run.prompt) for run in runs}
    mine = [run for run in baseline if (run.repeat, run.prompt) in cells]
    return sum(run.decode_s for run in mine) / sum(len(run.token_ids) for run in mine)


def _paired(runs: Sequence[RunRecord], base: dict[tuple[int, int], RunRecord]) -> tuple[PairedSpeedup | None, tuple[PromptRecord, ...]]:
    """The paired speedup over the complete (prompt × repeat) grid of `runs`, and per-prompt records."""
    prompts = sorted({run.prompt for run in runs})
    repeats = sorted({run.repeat for run in runs})
    cells = {(run.prompt, run.repeat): run for run in runs}
    if len(cells) != len(prompts) * len(repeats) or any((r, p) not in base for p, r in cells):
        return None, ()
    grid = [[cells[(p, r)] for r in repeats] for p in prompts]
    chain_s = np.array([[run.decode_s for run in row] for row in grid])  # [P, R]
    base_s = np.array([[base[(run.repeat, run.prompt)].decode_s for run in row] for row in grid])  # [P, R]
    paired = paired_speedup(chain_s, base_s)
    records = tuple(
        PromptRecord(
            prompt=p,
            tokens=int(np.median([len(run.token_ids) for run in row])),
            target_passes=float(np.median([run.forward_passes[0] for run in row])),
            decode_s=float(np.median(chain_s[i])),
            target_only_s=float(np.median(base_s[i])),
            speedup=paired.per_prompt[i],
        )
        for i, (p, row) in enumerate(zip(prompts, grid))
    )
    return paired, records


def _ratio(numerator: Repeated, denominator: Repeated) -> Repeated:
    return Repeated(tuple(a / b for a, b in zip(numerator.samples, denominator.samples)))


def headline(chains: Sequence[ChainResult]) -> Headline:
    """The recommended chain against target-only decoding, the best two-model and the fastest chain;
    the checks judged on the run and the diagnostics (docs/validation.md, "How it judges")."""
    recommended = next(chain for chain in chains if chain.recommended)
    lossless = [chain for chain in chains if chain.lossless]
    two = next((chain for chain in chains if ROLE_TWO_MODEL in chain.roles), None)
    fastest = max(lossless, key=lambda chain: chain.measured_speedup) if lossless else None
    over_two = None
    if two is not None and two.lossless and recommended.lossless:
        over_two = _ratio(recommended.measured.speedup, two.measured.speedup)
    within, gap = None, None
    if fastest is not None and recommended.lossless:
        if fastest is recommended:
            within = True
        elif fastest.measured.paired is not None and recommended.measured.paired is not None:
            gap = ratio_interval(fastest.measured.paired, recommended.measured.paired)
            within = gap.includes_one
        else:
            gap_repeats = _ratio(fastest.measured.speedup, recommended.measured.speedup)
            stderr = 0.0 if gap_repeats.std is None else gap_repeats.std / math.sqrt(len(gap_repeats.samples))
            within = gap_repeats.mean - 1.0 <= 2.0 * stderr
    checks = (_holds_check(lossless), _ranking_check(fastest, within, gap), _greedy_check(chains),
              _no_worse_check(chains, lossless))
    if recommended.lossless:
        predicted, errors = recommended.predicted, recommended.errors
        line = prediction_sentence(recommended) + " " + (
            f"Exact model {predicted.text()} ({errors.exact:+.1%}), paper's" if predicted.checked is not None else "Paper's"
        ) + f" Lemma 3.1 {predicted.paper:.2f}x ({errors.paper:+.1%})"
        if over_two is not None and two is not recommended:
            line += f"; {over_two.mean:.2f}x over the best two-model chain {two.label()}"
        if fastest is not None and fastest is not recommended:
            line += f"; fastest measured: {fastest.label()} at {fastest.measured.text()}" + (
                " (within noise)" if within else ""
            )
        line += "."
    else:
        line = (f"polyplan's prediction is not judged: the recommended chain {recommended.label()} is LOSSY "
                f"({recommended.measured.first_difference}); no speedup reported.")
    record = ReportHeadline(
        line=line,
        recommended=recommended.label(),
        measured_speedup=recommended.measured_speedup,
        speedup_std=recommended.measured.speedup.std if recommended.lossless else None,
        predicted_speedup=HeadlinePrediction(recommended.predicted.exact, recommended.predicted.paper),
        over_two_model=None if over_two is None else OverTwoModel(over_two.mean, over_two.std, two.label()),
        fastest=None if fastest is None else fastest.label(),
        fastest_speedup=None if fastest is None else fastest.measured_speedup,
        recommended_within_noise=within,
        fastest_over_recommended=gap,
    )
    return Headline(record, checks, _diagnostics(lossless))


@dataclass(frozen=True)
class Factor:
    """One factor of a prediction's error (predicted / measured − 1 of that factor alone), what it
    is called and why it moves the prediction that way."""

    name: str
    term: float
    why: str


def error_factors(chain: ChainResult) -> tuple[Factor, ...]:
    """The judged prediction's error split into factors whose (1 + term) multiply to 1 + the
    judged error: the exact model's cost split (`validation.cost_split`), times the self-check's
    correction where the plan stands by the checked prediction; () without a cost split."""
    split = chain.cost_split
    if split is None:
        return ()
    factors = [
        Factor("the target-only step", split.baseline,
               _by_sign(split.baseline, "target-only decoding ran faster in this run than the profile timed it",
                        "target-only decoding ran slower in this run than the profile timed it")),
        Factor("passes per token", split.forwards,
               _by_sign(split.forwards, "the drafters were accepted less on these prompts than on the profiled ones",
                        "the drafters were accepted more on these prompts than on the profiled ones")),
        _per_pass_factor(chain, split.per_pass),
        Factor("the decoding loop", split.loop,
               _by_sign(split.loop, "the loop between passes took longer than the plan's", "the loop between passes took less than the plan's")),
        Factor("the paired per-prompt ratio", split.aggregation,
               _by_sign(split.aggregation, "the paired speedup (per prompt, medians over repeats) is below the ratio of total times",
                        "the paired speedup (per prompt, medians over repeats) is above the ratio of total times")),
        Factor("the plan's speedup beyond its factors", split.model,
               "the plan's speedup is not its own target-only step over the time per token it priced"),
    ]
    predicted = chain.predicted
    if predicted.checked is not None:
        correction = predicted.checked / predicted.exact - 1.0
        measured_c = "" if predicted.composition is None else f" C = {predicted.composition:.3f}" + (
            "" if predicted.composition_interval is None else
            f" [{predicted.composition_interval[0]:.3f}, {predicted.composition_interval[1]:.3f}]")
        factors.append(Factor(
            "the self-check's correction", correction,
            f"its{measured_c} moved the exact model's prediction {'up' if correction > 0 else 'down'}, "
            f"and the exact model was off by {chain.errors.exact:+.1%}",
        ))
    return tuple(factors)


def _by_sign(term: float, positive: str, negative: str) -> str:
    """The reason for a factor's term: `positive` when it made the prediction too high, else `negative`."""
    return positive if term > 0 else negative


def _per_pass_factor(chain: ChainResult, term: float) -> Factor:
    """The seconds-per-pass factor, named by the member whose passes moved the chain's time most."""
    moved = [(level.model, costs.forwards * (costs.seconds_per_pass - costs.predicted_seconds_per_pass))
             for level, costs in ((level, _level_costs(level)) for level in chain.levels)]
    model, _ = max(moved, key=lambda item: abs(item[1]))
    slower = term > 0
    return Factor(f"seconds per pass of {model}", term,
                  f"its passes took {'longer' if slower else 'less'} inside the chain than the plan priced them")


def moved_most(chain: ChainResult) -> Factor | None:
    """The factor of `error_factors` that moved the judged prediction most in the direction of its
    error (largest |ln(1 + term)| of the terms signed like the error: a term of the other sign
    pulled the other way); None without factors or error."""
    error = chain.judged_error
    if error is None:
        return None
    along = [factor for factor in error_factors(chain) if factor.term * error > 0]
    return max(along, key=lambda factor: abs(math.log1p(factor.term)), default=None)


def prediction_sentence(chain: ChainResult) -> str:
    """One sentence: whether polyplan's prediction for the (lossless) recommended chain held, its
    measurement against the prediction the plan stands by, and, when it did not, the factor that moved most."""
    error, holds = chain.judged_error, chain.prediction_holds
    facts = (f"recommended {chain.label()} (K = {blocks_text(chain.block_sizes, chain.draft_policy)}) measured "
             f"{chain.measured.text()}, predicted {chain.predicted.judged_text()}")
    if holds is None:
        return f"polyplan's prediction is not judged (the plan gives it no interval): {facts}, {error:+.1%}."
    if holds:
        return f"polyplan's prediction held: {facts}, {error:+.1%}."
    where = "outside its interval" if not chain.inside_interval else f"more than {PREDICTION_TOLERANCE:.0%} from its point"
    sentence = f"polyplan's prediction did not hold: {facts}, off by {error:+.1%} ({where})"
    factor = moved_most(chain)
    if factor is not None:
        sentence += f", mostly in {factor.name} ({factor.term:+.1%}): {factor.why}"
    return sentence + "."


def _prediction_diagnostic(name: str, errors: list[tuple[ChainResult, float]], missing: str) -> Check:
    """Every (chain, prediction error) within PREDICTION_TOLERANCE; `missing` when there is none."""
    worst = max(errors, key=lambda item: abs(item[1]), default=None)
    if worst is None:
        return Check(name, None, PREDICTION_TOLERANCE, None, missing)
    return Check(
        name,
        abs(worst[1]),
        PREDICTION_TOLERANCE,
        all(abs(error) <= PREDICTION_TOLERANCE for _, error in errors),
        f"worst: {worst[0].label()} {worst[1]:+.1%}",
    )


def _diagnostics(lossless: Sequence[ChainResult]) -> tuple[Check, ...]:
    """The three predictions' errors against PREDICTION_TOLERANCE: information, not verdicts."""
    errors = [(chain, chain.errors.exact) for chain in lossless if chain.errors.exact is not None]
    checked = [(chain, chain.checked_error) for chain in lossless if chain.checked_error is not None]
    retimed = [(chain, chain.errors.exact_retimed) for chain in lossless if chain.errors.exact_retimed is not None]
    return (
        _prediction_diagnostic(DIAGNOSTIC_EXACT, errors, "no lossless chain"),
        _prediction_diagnostic(DIAGNOSTIC_CHECKED, checked, "the plan ran no self-check (recommend --candidates runs it; --no-check skips it)"),
        _prediction_diagnostic(DIAGNOSTIC_RETIMED, retimed, "not re-timed (no profile)"),
    )


def _miss(chain: ChainResult) -> str:
    """How a prediction that does not hold misses: outside its interval, or too far from its point."""
    facts = f"{chain.label()} measured {chain.measured_speedup:.2f}x"
    if not chain.inside_interval:
        return f"{facts} outside {chain.predicted.judged_text()}"
    return f"{facts} inside {chain.predicted.judged_text()} but {chain.judged_error:+.1%} from its point"


def _holds_check(lossless: Sequence[ChainResult]) -> Check:
    """Every lossless chain's measured speedup inside its predicted interval and within PREDICTION_TOLERANCE."""
    judged = [chain for chain in lossless if chain.prediction_holds is not None]
    if not judged:
        return Check(CHECK_HOLDS, None, 0.0, None, "the plan has no prediction intervals (re-run polyplan recommend)")
    failing = [chain for chain in judged if not chain.prediction_holds]
    detail = "; ".join(_miss(chain) for chain in failing) or f"{len(judged)} chain(s) hold"
    return Check(CHECK_HOLDS, float(len(failing)), 0.0, not failing, detail)


def _ranking_check(fastest: ChainResult | None, within: bool | None, gap: SpeedupRatio | None) -> Check:
    """The recommended chain the fastest measured, or tied with it within the paired CI."""
    detail = "no lossless chain" if fastest is None else f"fastest: {fastest.label()} {fastest.measured.text()}"
    if gap is not None:
        detail += (f"; its paired speedup over the recommended chain {gap.point:.3f}x, "
                   f"{gap.level:.0%} CI [{gap.low:.3f}, {gap.high:.3f}] {'contains' if gap.includes_one else 'excludes'} 1")
    return Check(CHECK_FASTEST, None if fastest is None else fastest.measured_speedup, 0.0, within, detail)


def _greedy_check(chains: Sequence[ChainResult]) -> Check:
    """Every chain's greedy output target-only decoding's, token for token (a near-tie counts as
    equal, with its reason); undecided under sampling, whose outputs are random."""
    drafting = [chain for chain in chains if len(chain.chain) > 1]
    if not drafting or all(chain.measured.greedy_equal is None for chain in drafting):
        return Check(CHECK_GREEDY, None, 0.0, None,
                     "sampling: outputs are random, so they are not compared token for token" if drafting else "no chain drafts")
    lossy = [chain for chain in drafting if not chain.lossless]
    ties = [chain for chain in drafting if chain.measured.near_tie is not None]
    if lossy:
        detail = "; ".join(f"{chain.label()} differs: {chain.measured.first_difference}" for chain in lossy)
    else:
        detail = f"{len(drafting)} chain(s) equal" + "".join(
            f"; {chain.label()} parted at a near-tie ({chain.measured.near_tie})" for chain in ties)
    return Check(CHECK_GREEDY, float(len(lossy)), 0.0, not lossy, detail)


def _no_worse_check(chains: Sequence[ChainResult], lossless: Sequence[ChainResult]) -> Check:
    """Every lossless checked chain: |checked error| − |exact error| at most the check's own stated
    uncertainty (`ChainPredictions.check_uncertainty`); undecided when the plan ran no self-check."""
    judged = [chain for chain in lossless if len(chain.chain) > 1
              and chain.check_worsened_by is not None and chain.predicted.check_uncertainty is not None]
    if not judged:
        ran = any(chain.predicted.checked is not None for chain in chains)
        return Check(CHECK_NO_WORSE, None, 0.0, None, "no lossless chain was self-checked" if ran
                     else "the plan ran no self-check (recommend --candidates runs it; --no-check skips it)")
    excess = [(chain, chain.check_worsened_by - chain.predicted.check_uncertainty) for chain in judged]
    failing = [(chain, beyond) for chain, beyond in excess if beyond > 0]

    def said(chain: ChainResult) -> str:
        worsened = chain.check_worsened_by
        return (f"{chain.label()} checked {chain.checked_error:+.1%} against exact {chain.errors.exact:+.1%}, "
                f"{abs(worsened) * 100:.1f} points {'further off' if worsened > 0 else 'closer'}, C's uncertainty "
                f"±{chain.predicted.check_uncertainty:.1%}")

    worst, beyond = max(excess, key=lambda item: item[1])
    if failing:
        detail = "; ".join(said(chain) for chain, _ in failing)
    else:
        detail = f"{len(judged)} chain(s); the closest to failing: {said(worst)}"
    return Check(CHECK_NO_WORSE, beyond, 0.0, not failing, detail)
