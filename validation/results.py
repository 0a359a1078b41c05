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
    PromptRecord, ReportHeadline, ReportLevel, ReportSettings, SpeedupErrors, TokensPerVerification,
)
from polyplan.validation.cost_split import LevelCosts, Price, cost_split, mean_width, merged_tallies, profile_seconds_per_pass
from polyplan.validation.paired import PairedSpeedup, paired_speedup, ratio_interval

ROLE_RECOMMENDED = "recommended"
ROLE_ALTERNATIVE = "alternative"
ROLE_TWO_MODEL = "best two-model"
ROLE_TARGET_ONLY = "target only"

PREDICTION_TOLERANCE = 0.10  # the exact model's promise, relative to the measured speedup
TARGET_SPEEDUP = 2.0  # the recommended chain over target-only decoding
TARGET_OVER_TWO_MODEL = 1.15  # the recommended chain over the best two-model chain


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
    """The recommended chain's result and how it compares, as report.json keeps it, and its checks."""

    record: ReportHeadline
    checks: tuple[Check, ...]


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
    """The recommended chain against target-only decoding, the best two-model and the fastest chain, and its checks."""
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
    checks = _checks(recommended, lossless, over_two, two, fastest, within, gap)
    if recommended.lossless:
        line = (
            f"recommended {recommended.label()} (K = {blocks_text(recommended.block_sizes, recommended.draft_policy)}): measured "
            f"{recommended.measured.text()} over target-only decoding "
            f"(exact model predicted {recommended.predicted.text()}, {recommended.errors.exact:+.1%}; "
            f"paper's Lemma 3.1 {recommended.predicted.paper:.2f}x, {recommended.errors.paper:+.1%})"
        )
        if over_two is not None and two is not recommended:
            line += f"; {over_two.mean:.2f}x over the best two-model chain {two.label()}"
        if fastest is not None and fastest is not recommended:
            line += f"; fastest measured: {fastest.label()} at {fastest.measured.text()}" + (
                " (within noise)" if within else ""
            )
    else:
        line = f"recommended {recommended.label()}: LOSSY ({recommended.measured.first_difference}); no speedup reported"
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
    return Headline(record, checks)


def _prediction_check(name: str, errors: list[tuple[ChainResult, float]], missing: str) -> Check:
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


def _holds_check(lossless: Sequence[ChainResult]) -> Check:
    """Every lossless chain's measured speedup inside its predicted interval and within PREDICTION_TOLERANCE."""
    judged = [chain for chain in lossless if chain.prediction_holds is not None]
    name = "every prediction holds: measured speedup inside its predicted interval and within 10% of the point"
    if not judged:
        return Check(name, None, PREDICTION_TOLERANCE, None, "the plan has no prediction intervals (re-run polyplan recommend)")
    failing = [chain for chain in judged if not chain.prediction_holds]
    detail = "; ".join(
        f"{chain.label()}: measured {chain.measured_speedup:.2f}x vs {chain.predicted.judged_text()}" for chain in failing
    ) or f"{len(judged)} chain(s) hold"
    return Check(name, float(len(failing)), 0.0, not failing, detail)


def _checks(recommended, lossless, over_two, two, fastest, within, gap=None) -> tuple[Check, ...]:
    errors = [(chain, chain.errors.exact) for chain in lossless if chain.errors.exact is not None]
    retimed = [(chain, chain.errors.exact_retimed) for chain in lossless if chain.errors.exact_retimed is not None]
    ranking = "no lossless chain" if fastest is None else f"fastest: {fastest.label()} {fastest.measured.text()}"
    if gap is not None:
        ranking += (f"; its paired speedup over the recommended chain {gap.point:.3f}x, "
                    f"{gap.level:.0%} CI [{gap.low:.3f}, {gap.high:.3f}] {'contains' if gap.includes_one else 'excludes'} 1")
    checked = [(chain, chain.checked_error) for chain in lossless if chain.checked_error is not None]
    checks = [
        _prediction_check("exact model within 10% of the measured speedup (every lossless chain)", errors, "no lossless chain"),
        _prediction_check("checked prediction (recommend's self-check) within 10% (every lossless chain)", checked,
                          "the plan ran no self-check (recommend --candidates runs it; --no-check skips it)"),
        _prediction_check("exact model on latency re-timed during the run within 10% (every lossless chain)", retimed,
                          "not re-timed (no profile)"),
        Check(
            "recommended chain is the fastest measured (or tied: the paired CI of the fastest over it contains 1)",
            None if fastest is None else fastest.measured_speedup,
            0.0,
            within,
            ranking,
        ),
        Check(
            f"recommended chain >= {TARGET_SPEEDUP:g}x over target-only decoding",
            recommended.measured_speedup,
            TARGET_SPEEDUP,
            None if recommended.measured_speedup is None else recommended.measured_speedup >= TARGET_SPEEDUP,
            "lossy" if recommended.measured_speedup is None else f"{recommended.measured_speedup:.2f}x",
        ),
        Check(
            f"recommended chain >= {TARGET_OVER_TWO_MODEL:g}x over the best two-model chain",
            None if over_two is None else over_two.mean,
            TARGET_OVER_TWO_MODEL,
            None if over_two is None else over_two.mean >= TARGET_OVER_TWO_MODEL,
            "no lossless two-model chain" if over_two is None else f"{over_two.mean:.2f}x over {two.label()}",
        ),
        _holds_check(lossless),
    ]
    return tuple(checks)
