"""Prediction intervals: how far the exact model's speedup can move with the measurement noise.

A seeded bootstrap: each replicate redraws the measured inputs as the profiler's own sampling
would have varied (latency timings; acceptance by prompt, one draw shared by every pair and
stream; timing-health corrections), re-evaluates `planner.exact.cost_model.predict_chain` with the
block sizes fixed, and stretches its deviation for few prompts (`few_prompts_stretch`). The loop
overhead, the switch costs and Lemma 3.1 are not resampled. The laws and their reasons:
docs/cost-model.md, "Prediction intervals".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from polyplan.formats.errors import PolyplanError
from polyplan.planner.exact.cost_model import ChainSettings, predict_chain
from polyplan.formats.plan import FIXED_DRAFTS, DraftPolicy
from polyplan.planner.exact.ngram_replay import ngram_simple_sizes, target_streams
from polyplan.planner.exact.policy_replay import replayed_rounds
from polyplan.planner.exact.latency import LatencyCurve, curve_from_profile
from polyplan.formats.overhead import NO_SWITCH
from polyplan.planner.exact.overhead import profile_switch_costs
from polyplan.planner.exact.runs import count_matrix, profile_runs, survival_from_counts
from polyplan.formats.profile import ModelProfile, Profile, TimingHealth
from polyplan.formats.options import integer_at_least
from polyplan.planner.intervals.timing_health import MAX_FLOOR_NOISE, MAX_FLOOR_SHIFT

DEFAULT_RESAMPLES = 200
DEFAULT_LEVEL = 0.95
_MEDIAN_EFFICIENCY = 1.2533  # sd(median) / sd(mean) for Gaussian samples: sqrt(pi / 2)
IQR_TO_SD = 1.349  # IQR of a standard normal
# A noisy floor's spread is per call; a latency curve is a median over many rounds, and what moves
# it between the profile and the run is the machine's level drifting, about half the per-call
# spread where it was measured (docs/profiling.md, "What the floor measures").
FLOOR_DRIFT_SHARE = 0.5
_Z95 = 1.96
_NEW_PROMPT_SET = float(np.sqrt(2.0))  # a new prompt set's error on top of the profile's: the same again, independent
_TIES_SHOWN = 3  # chains named in the ranking line (the plan lists them all)


@dataclass(frozen=True)
class SpeedupInterval:
    """A predicted speedup with its bootstrap percentile interval at `level`."""

    point: float
    low: float
    high: float
    level: float

    def text(self) -> str:
        """The point and the interval: `<point>x [<low>, <high>]`, two decimals each."""
        return f"{self.point:.2f}x [{self.low:.2f}, {self.high:.2f}]"

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def overlaps(self, other: "SpeedupInterval") -> bool:
        return self.low <= other.high and other.low <= self.high


@dataclass(frozen=True)
class ChainInterval:
    """One chain's interval and how it compares with the best chain on the same replicates."""

    chain: tuple[str, ...]
    block_sizes: tuple[int, ...]
    speedup: SpeedupInterval
    overlaps_best: bool  # its interval overlaps the best chain's (cannot be told apart)
    beats_best: float  # share of replicates where it is faster than the best chain (0 for the best)


@dataclass(frozen=True)
class PredictionIntervals:
    """Intervals for ranked chains (best first) and what was resampled to get them."""

    chains: tuple[ChainInterval, ...]
    resamples: int
    level: float
    seed: int
    latency_source: str  # "samples" (stored timings), "median_iqr" (normal approximation) or "mixed"
    acceptance_source: str  # "runs" (prompts resampled), "streams" (a rule drafter's replay), "alpha_ci", "alpha_samples", "fixed" or "mixed"
    widened: tuple[str, ...] = ()  # one line per timing-health widening (module docstring)
    prompt_stretch: float = 1.0  # the few-prompts stretch of every replicate's deviation (`few_prompts_stretch`)

    def of(self, chain: Sequence[str]) -> ChainInterval | None:
        for item in self.chains:
            if item.chain == tuple(chain):
                return item
        return None

    @property
    def without_noise(self) -> bool:
        """Every interval has zero width: the profile gave the bootstrap nothing to resample."""
        return all(item.speedup.low == item.speedup.high for item in self.chains)

    def tied_with_best(self) -> tuple[ChainInterval, ...]:
        """Chains other than the best whose interval overlaps the best's."""
        return tuple(item for item in self.chains[1:] if item.overlaps_best)

    def ranking_line(self) -> str:
        """One line saying whether the top of the ranking can be told apart."""
        if not self.chains:
            return "no chain"
        best = self.chains[0]
        tied = self.tied_with_best()
        level = f"{self.level:.0%}"
        if self.without_noise:
            return ("ranking: not judged: every interval has zero width because the profile records no measurement "
                    "noise (no timings or IQR, no acceptance interval or runs)")
        if not tied:
            return (f"ranking: {' > '.join(best.chain)} is ahead of every other chain "
                    f"(no {level} interval overlaps {best.speedup.text()})")
        names = "; ".join(f"{' > '.join(item.chain)} {item.speedup.text()} (faster in {item.beats_best:.0%} of resamples)"
                          for item in tied[:_TIES_SHOWN])
        if len(tied) > _TIES_SHOWN:
            names += f"; and {len(tied) - _TIES_SHOWN} more"
        return (f"ranking: cannot tell {' > '.join(best.chain)} {best.speedup.text()} apart from: {names} "
                f"({level} intervals overlap)")


def _latency_replicates(model: ModelProfile, resamples: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """[resamples, points] replicate medians for each latency point of `model`, and the source."""
    columns, sources = [], set()
    for point in model.latency:
        if point.samples_s:
            samples = np.asarray(point.samples_s, dtype=float)
            picks = rng.integers(0, samples.size, size=(resamples, samples.size))
            columns.append(np.median(samples[picks], axis=1))
            sources.add("samples")
        else:
            repeats = point.repeats or 1
            error = _MEDIAN_EFFICIENCY * (point.iqr_s / IQR_TO_SD) / np.sqrt(repeats)
            draws = point.median_s + error * rng.standard_normal(resamples)
            columns.append(np.maximum(draws, point.median_s * 1e-3))  # a time stays > 0
            sources.add("median_iqr")
    return np.stack(columns, axis=1), _merge(sources)


def _curve_replicates(profile: Profile, names: Sequence[str], resamples: int, rng: np.random.Generator,
                      context_length: int | None) -> tuple[dict[str, list[LatencyCurve]], str]:
    curves, sources = {}, set()
    for name in names:
        model = profile.model(name)
        medians, source = _latency_replicates(model, resamples, rng)
        sources.add(source)
        curves[name] = [
            curve_from_profile(
                dataclasses.replace(model, latency=[dataclasses.replace(point, median_s=float(value))
                                                    for point, value in zip(model.latency, row)]),
                context_length,
            )
            for row in medians
        ]
    return curves, _merge(sources)


def latency_replicates(profile: Profile, names: Sequence[str], resamples: int, rng: np.random.Generator,
                       context_length: int | None = None, *, slower_only: bool = True
                       ) -> tuple[dict[str, list[LatencyCurve]], str, tuple[str, ...]]:
    """Per model of `names`, `resamples` replicate latency curves with the timing-health
    corrections, the latency source ("samples", "median_iqr" or "mixed") and one line per widening.
    `slower_only` False leaves out the corrections that only ever scale a curve down (a floor
    slower than the quietest, a loaded machine), keeping the floor's symmetric noise: for a ratio
    whose other seconds (a server's loop) are not replicated, a one-sided scale of T(k) alone is a
    bias, not an uncertainty."""
    curves, source = _curve_replicates(profile, names, resamples, rng, context_length)
    factors, widened = _health_factors(profile, names, resamples, rng, slower_only)
    for name, scale in factors.items():
        curves[name] = [_scaled(curve, float(f)) for curve, f in zip(curves[name], scale)]
    return curves, source, widened


def _merge(sources: set[str]) -> str:
    return next(iter(sources)) if len(sources) == 1 else "mixed"


def prompt_weights(prompts: int, resamples: int, rng: np.random.Generator, new_set: bool = True,
                    set_size: int | None = None) -> np.ndarray:
    """[resamples, prompts]: how often each prompt is drawn in each replicate's new prompt set of
    `set_size` prompts (None: the profile's count) drawn from a cluster resample of the profile's;
    `new_set` False: in the cluster resample itself."""
    profiled = rng.integers(0, prompts, size=(resamples, prompts))
    size = prompts if set_size is None else set_size
    picks = np.take_along_axis(profiled, rng.integers(0, prompts, size=(resamples, size)), axis=1) if new_set else profiled
    weights = np.zeros((resamples, prompts))
    np.add.at(weights, (np.arange(resamples)[:, None], picks), 1.0)
    return weights


class _AcceptanceReplicates:
    """Per (verifier, drafter): what the exact model reads in each replicate."""

    def __init__(self, profile: Profile, settings: ChainSettings, resamples: int, rng: np.random.Generator,
                 new_set: bool = True, set_size: int | None = None):
        self.profile, self.sampling, self.resamples, self.rng, self.new_set = profile, settings.sampling, resamples, rng, new_set
        self.set_size = set_size  # the new set's prompt count (None: as many as the profile's)
        self.runs = profile_runs(profile, self.sampling) if settings.acceptance_model in ("auto", "runs") else {}
        entry = profile.acceptance_runs.get(self.sampling)
        self.confidences = {} if entry is None else entry.confidences_by_pair()
        self._weights: dict[int, np.ndarray] = {}
        self.prompts: int | None = None  # how many prompts were resampled (the fewest, if several sets)
        self._alphas: dict[tuple[str, str], np.ndarray] = {}
        self._survivals: dict[tuple[str, str, int], list] = {}
        self.sources: set[str] = set()
        self.rule_drafters = ngram_simple_sizes(profile)
        self.streams = target_streams(profile)

    def _rounds(self, pair: tuple[str, str], block: int, policy: DraftPolicy = FIXED_DRAFTS) -> list:
        """The replayed rounds (a rule drafter's, or a model drafter's under a draft policy), their
        streams or agreement sequences resampled by the shared prompt draw."""
        key = pair + (block, policy)
        if key not in self._survivals:
            rounds, prompts = self._replayed(pair, block, policy)
            self._survivals[key] = [rounds.resampled(weights) for weights in self._prompt_draw(prompts)]
        return self._survivals[key]

    def _replayed(self, pair: tuple[str, str], block: int, policy: DraftPolicy):
        """The replayed rounds as measured (`_rounds` resamples them), and how many prompts they come from."""
        replayed = replayed_rounds(pair, block, policy, self.rule_drafters, self.streams, self.runs, self.confidences)
        self.sources.add("streams" if pair[1] in self.rule_drafters else "runs")
        return replayed

    def measured(self, pair: tuple[str, str], block: int, policy: DraftPolicy = FIXED_DRAFTS):
        """What `read` resamples, on the profile as measured: the replayed rounds, the run
        survival of every prompt, or α."""
        if pair[1] in self.rule_drafters or policy != FIXED_DRAFTS:
            return self._replayed(pair, block, policy)[0]
        if pair not in self.runs:
            return float(np.clip(self.profile.stats(*pair, self.sampling).alpha, 0.0, 1.0 - 1e-6))
        at_risk, going_on, starts = count_matrix(self.runs[pair], block)
        return survival_from_counts(at_risk.sum(axis=0), going_on.sum(axis=0), int(starts.sum()))

    def _prompt_draw(self, prompts: int) -> np.ndarray:
        """The replicates' prompt sets, one draw shared by every pair and stream measured on the
        same prompts, so that the levels of a chain move together."""
        if prompts not in self._weights:
            self._weights[prompts] = prompt_weights(prompts, self.resamples, self.rng, self.new_set, self.set_size)
            self.prompts = prompts if self.prompts is None else min(self.prompts, prompts)
        return self._weights[prompts]

    def weights(self, pair: tuple[str, str]) -> np.ndarray:
        return self._prompt_draw(len(self.runs[pair]))

    @property
    def _set_factor(self) -> float:
        """An α standard error's multiple: the profile's error and a new set's, or the profile's
        alone; a new set of m prompts where the profile had n adds its error times sqrt(n / m)."""
        if not self.new_set:
            return 1.0
        profiled = None if self.profile.profiler is None else self.profile.profiler.prompts
        if self.set_size is None or not profiled:
            return _NEW_PROMPT_SET
        return float(np.sqrt(1.0 + profiled / self.set_size))

    def alphas(self, pair: tuple[str, str]) -> np.ndarray:
        if pair in self._alphas:
            return self._alphas[pair]
        stats = self.profile.stats(*pair, self.sampling)
        alpha = stats.alpha
        if pair in self.runs and self.runs[pair]:
            agree = np.asarray([sum(seq) for seq in self.runs[pair]], dtype=float)
            length = np.asarray([len(seq) for seq in self.runs[pair]], dtype=float)
            weights = self.weights(pair)
            full = agree.sum() / max(length.sum(), 1.0)
            rates = (weights @ agree) / np.maximum(weights @ length, 1.0)
            values = alpha * rates / full if full > 0 else np.full(self.resamples, alpha)
            self.sources.add("runs")
        elif stats.alpha_ci is not None:
            error = self._set_factor * (stats.alpha_ci[1] - stats.alpha_ci[0]) / (2 * _Z95)
            values = alpha + error * self.rng.standard_normal(self.resamples)
            self.sources.add("alpha_ci")
        elif stats.alpha_samples:
            error = self._set_factor * np.sqrt(alpha * (1 - alpha) / stats.alpha_samples)
            values = alpha + error * self.rng.standard_normal(self.resamples)
            self.sources.add("alpha_samples")
        else:
            values = np.full(self.resamples, alpha)
            self.sources.add("fixed")
        self._alphas[pair] = np.clip(values, 0.0, 1.0 - 1e-6)
        return self._alphas[pair]

    def read(self, pair: tuple[str, str], block: int, policy: DraftPolicy = FIXED_DRAFTS) -> list:
        """The exact model's acceptance input for each replicate (`policy`: the last level's)."""
        if pair[1] in self.rule_drafters or policy != FIXED_DRAFTS:
            return self._rounds(pair, block, policy)
        if pair not in self.runs:
            return list(self.alphas(pair))
        key = pair + (block,)
        if key not in self._survivals:
            at_risk, going_on, starts = count_matrix(self.runs[pair], block)
            weights = self.weights(pair)
            pooled_risk, pooled_on, pooled_starts = weights @ at_risk, weights @ going_on, weights @ starts
            # the full sample's survival: what a replicate that drew no complete verification reads
            full = survival_from_counts(at_risk.sum(axis=0), going_on.sum(axis=0), int(starts.sum()))
            self._survivals[key] = [
                survival_from_counts(pooled_risk[b], pooled_on[b], int(pooled_starts[b])) if pooled_starts[b] > 0 else full
                for b in range(self.resamples)
            ]
            self.sources.add("runs")
        return self._survivals[key]


def prediction_intervals(
    profile: Profile,
    chains: Sequence[tuple[Sequence[str], Sequence[int], float]],
    settings: ChainSettings = ChainSettings(),
    *,
    resamples: int = DEFAULT_RESAMPLES,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
    new_set: bool = True,
) -> PredictionIntervals:
    """Bootstrap intervals of the exact model's speedup for `chains`: (chain, block sizes, point
    speedup on the profile as measured[, the last level's `formats.plan.DraftPolicy`]), best first,
    read as `settings` says. `resamples` (>= 20) replicates, `level` in (0, 1), every draw from one
    Generator seeded `seed`; `new_set` False: for the workload's mean (one prompt draw) instead of
    a new prompt set of the profile's size."""
    integer_at_least(resamples, 20, "resamples")
    if not 0 < level < 1:
        raise PolyplanError(f"level: must be in (0, 1), got {level!r}")
    if not chains:
        raise PolyplanError("chains: give at least one chain")
    rng = np.random.default_rng(seed)
    names = sorted({name for chain, *_ in chains for name in chain})
    curves, latency_source, widened = latency_replicates(profile, names, resamples, rng, settings.context_length)
    acceptance = _AcceptanceReplicates(profile, settings, resamples, rng, new_set)
    switches = profile_switch_costs(profile)
    speedups = np.empty((len(chains), resamples))
    for row, (chain, blocks, _, *rest) in enumerate(chains):
        pairs = list(zip(chain, chain[1:]))
        policy = (rest[0] if rest else None) or FIXED_DRAFTS
        reads = [acceptance.read(pair, k, policy if level == len(pairs) - 1 else FIXED_DRAFTS)
                 for level, (pair, k) in enumerate(zip(pairs, blocks))]
        switch = [switches.get(name, NO_SWITCH) for name in chain]
        for b in range(resamples):
            speedups[row, b] = predict_chain(
                [read[b] for read in reads], [curves[name][b] for name in chain], list(blocks), settings.overhead, switch
            ).speedup
    stretch = few_prompts_stretch(acceptance.prompts, level)
    points = np.asarray([point for _, _, point, *_ in chains], dtype=float)[:, None]
    speedups = points * (speedups / points) ** stretch
    tail = 100 * (1 - level) / 2
    bounds = np.percentile(speedups, [tail, 100 - tail], axis=1)  # [2, chains]
    intervals = [
        SpeedupInterval(float(point), min(float(bounds[0, i]), float(point)), max(float(bounds[1, i]), float(point)), level)
        for i, (_, _, point, *_) in enumerate(chains)
    ]
    best = intervals[0]
    items = tuple(
        ChainInterval(
            chain=tuple(chain),
            block_sizes=tuple(int(k) for k in blocks),
            speedup=interval,
            overlaps_best=i > 0 and interval.overlaps(best),
            beats_best=0.0 if i == 0 else float(np.mean(speedups[i] > speedups[0])),
        )
        for i, ((chain, blocks, *_), interval) in enumerate(zip(chains, intervals))
    )
    return PredictionIntervals(items, resamples, level, seed, latency_source,
                               _merge(acceptance.sources) if acceptance.sources else "fixed", widened, stretch)


@dataclass(frozen=True)
class PairReplicates:
    """One target > drafter prediction's inputs per replicate and as measured (`pair_replicates`)."""

    target: tuple[LatencyCurve, ...]
    drafter: tuple[LatencyCurve, ...]
    acceptance: tuple
    measured: object  # the acceptance input on the profile as measured
    stretch: float


def pair_replicates(profile: Profile, target: str, drafter: str, block: int, settings: ChainSettings = ChainSettings(), *,
                    policy: DraftPolicy = FIXED_DRAFTS, resamples: int = DEFAULT_RESAMPLES, level: float = DEFAULT_LEVEL, seed: int = 0, new_set: bool = True,
                    set_size: int | None = None) -> PairReplicates:
    """`resamples` replicates of what predicts `target > drafter` at block size `block` (under
    `policy`), drawn as `prediction_intervals` draws them, for a caller that prices the pair its own
    way and reads the interval with `percentile_interval`. `set_size`: the new prompt set's count
    (None: the profile's)."""
    integer_at_least(resamples, 20, "resamples")
    rng = np.random.default_rng(seed)
    curves, _, _ = latency_replicates(profile, [target, drafter], resamples, rng, settings.context_length)
    acceptance = _AcceptanceReplicates(profile, settings, resamples, rng, new_set, set_size)
    reads = acceptance.read((target, drafter), block, policy)
    measured = acceptance.measured((target, drafter), block, policy)
    return PairReplicates(tuple(curves[target]), tuple(curves[drafter]), tuple(reads), measured,
                          few_prompts_stretch(acceptance.prompts, level))


def percentile_interval(point: float, replicates: np.ndarray, measured: float, stretch: float = 1.0,
                        level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """The `level` percentile interval of a predicted speedup `point`: each replicate's deviation
    from the same prediction on the inputs as measured (`measured`), log(replicate / measured),
    stretched by `stretch` for few prompts and applied to the point, widened to hold the point.
    (`measured` is the point itself where the point was made from the same inputs.)"""
    deviations = np.log(np.asarray(replicates, dtype=float) / measured) * stretch
    low, high = np.percentile(point * np.exp(deviations), [50 * (1 - level), 50 * (1 + level)])
    return float(min(low, point)), float(max(high, point))


def stretch_words(stretch: float) -> str:
    """The few-prompts stretch as words for a line (`, each deviation x<stretch> …`), or nothing."""
    return "" if stretch == 1.0 else f", each deviation x{stretch:.2f} for few prompts (Student's t)"


def few_prompts_stretch(prompts: int | None, level: float) -> float:
    """The factor on each replicate's log-speedup deviation when the acceptance came from only
    `prompts` prompts (None or < 2: 1.0): t_{n−1} / z · sqrt(n / (n − 1)) at `level`, Student's t
    allowance for a bootstrap over n clusters reading their spread as if it were known."""
    if prompts is None or prompts < 2:
        return 1.0
    from scipy.stats import norm, t

    upper = 0.5 + level / 2
    return float(t.ppf(upper, prompts - 1) / norm.ppf(upper) * np.sqrt(prompts / (prompts - 1)))


def _scaled(curve: LatencyCurve, factor: float) -> LatencyCurve:
    return LatencyCurve(curve.ks, tuple(factor * value for value in curve.seconds))


def _correction(full: float, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Factors between 1 (as measured) and `full` (fully corrected): half the replicates at
    `full`, half a uniform share of the way there."""
    share = np.where(rng.random(resamples) < 0.5, 1.0, rng.random(resamples))
    return 1.0 - share * (1.0 - full)


def _health_factors(profile: Profile, names: Sequence[str], resamples: int, rng: np.random.Generator,
                    slower_only: bool = True) -> tuple[dict[str, np.ndarray], tuple[str, ...]]:
    """Per model whose timing-health check failed, a factor on its curve per replicate, and one
    line per widening (`slower_only` False: the floor's noise alone, `latency_replicates`)."""
    floors = {model.name: model.timing.reference_median_s for model in profile.models
              if model.timing is not None and model.timing.reference_median_s}
    quietest = min(floors.values()) if floors else None
    shifted = quietest is not None and max(floors.values()) / quietest > MAX_FLOOR_SHIFT
    factors: dict[str, np.ndarray] = {}
    widened: dict[str, list[str]] = {}  # reasons -> models
    for name in names:
        health = profile.model(name).timing or TimingHealth()
        factor = np.ones(resamples)
        reasons = []
        if slower_only and shifted and name in floors and floors[name] > quietest:
            shift = floors[name] / quietest
            factor *= _correction(1.0 / shift, resamples, rng)
            reasons.append(f"the machine floor was {shift:.2f}x slower while it was timed than at the quietest")
        load, cpus = health.load_average, health.cpus
        if slower_only and load is not None and cpus is not None and load > cpus:
            factor *= _correction(cpus / load, resamples, rng)
            reasons.append(f"load {load:.1f} on {cpus} core(s) when timing began")
        noise = health.reference_relative_iqr
        if noise is not None and noise > MAX_FLOOR_NOISE:
            factor *= np.exp(FLOOR_DRIFT_SHARE * noise / IQR_TO_SD * rng.standard_normal(resamples))
            reasons.append(f"the machine floor's IQR/median was {noise:.1%}")
        if reasons:
            factors[name] = factor
            widened.setdefault("; ".join(reasons), []).append(name)
    lines = []
    for reasons, models in widened.items():
        low = min(float(np.percentile(factors[name], 2.5)) for name in models)
        high = max(float(np.percentile(factors[name], 97.5)) for name in models)
        lines.append(f"{', '.join(models)}: latency x [{low:.2f}, {high:.2f}] ({reasons})")
    return factors, tuple(lines)
