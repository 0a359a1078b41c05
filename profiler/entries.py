"""Measurements as profile entries (the schema's types), and the disagreement warnings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from polyplan.formats.profile import (
    AlphaDistribution, DecodedStats, ImpliedStats, LatencyPoint, ModelProfile, PrefillPoint, SamplingStats, TimingHealth,
)
from polyplan.decoder.ngram_simple import NGramSimpleMember
from polyplan.profiler.acceptance import DecodedMeasurement, PairAlpha
from polyplan.profiler.forward_timing import LatencyMeasurement
from polyplan.planner.intervals.sample_size import enough_for_interval, interval_warnings


def model_entry(name: str, fingerprint: str, measurement: LatencyMeasurement, key: str) -> ModelProfile:
    """A model's profile entry from its latency measurement (`key`: the latency fingerprint)."""
    return ModelProfile(
        name=name,
        fingerprint=fingerprint,
        latency=tuple(
            LatencyPoint(p.context_length, p.k, p.time.median, p.time.iqr, p.time.repeats, tuple(p.time.kept) or None, p.time.outliers)
            for p in measurement.points
        ),
        prefill=tuple(PrefillPoint(p.context_length, p.time.median, p.time.iqr, p.time.repeats) for p in measurement.prefill),
        latency_fingerprint=key,
        timing=timing_health(measurement),
    )


def ngram_simple_size(member: object) -> int | None:
    """size_n of an `ngram-simple` member (what `ModelProfile.ngram_simple` records), else None."""
    return member.size_n if isinstance(member, NGramSimpleMember) else None


def timing_health(measurement: LatencyMeasurement) -> TimingHealth | None:
    """The machine's noise floor during this model's timing, the outliers dropped, whether the
    budget for repeating noisy rounds ran out, the threads and cores, and the load average."""
    if measurement.reference is None or not measurement.reference.median > 0:
        return None
    both = measurement.threads is not None and measurement.cpus is not None
    return TimingHealth(
        reference_median_s=measurement.reference.median,
        reference_relative_iqr=measurement.reference.relative_iqr,
        latency_outliers=sum(point.time.outliers for point in measurement.points),
        latency_timings=sum(point.time.repeats + point.time.outliers for point in measurement.points),
        noise_budget_exhausted=bool(measurement.budget_exhausted),
        threads=measurement.threads if both else None,
        cpus=measurement.cpus if both else None,
        load_average=None if measurement.load_average is None else round(measurement.load_average, 2),
    )


def sampling_entry(estimate: PairAlpha, key: str, ks: Sequence[int], prompts: int | None = None) -> SamplingStats:
    """A pair's statistics under one sampling mode from its α estimate; implied μ at each of `ks`.
    The interval is left out when `prompts` are too few for one (`polyplan.planner.intervals.sample_size`)."""
    return SamplingStats(
        alpha=estimate.alpha,
        alpha_samples=estimate.samples,
        alpha_ci=(estimate.interval.low, estimate.interval.high) if enough_for_interval(prompts) else None,
        alpha_distribution=AlphaDistribution(
            mean=estimate.raw_alpha,
            std=estimate.std,
            quantiles=estimate.quantiles,
            samples=estimate.samples,
            autocorrelation=estimate.autocorrelation,
        ),
        implied=tuple(ImpliedStats(k, estimate.implied_mu(k), estimate.positional_mu(k)) for k in ks),
        fingerprint=key,
        engine_alpha=None if estimate.engine is None else estimate.engine.alpha,
        engine_alpha_ci=None if estimate.engine is None else (estimate.engine.interval.low, estimate.engine.interval.high),
    )


def decoded_entry(measurement: DecodedMeasurement, prompts: int, key: str) -> DecodedStats:
    """A decoded-μ entry measured over `prompts` prompts (no intervals from too few of them)."""
    enough = enough_for_interval(prompts)
    return DecodedStats(
        k=measurement.k,
        mu=measurement.mu,
        sigma=measurement.sigma,
        samples=measurement.verifications,
        mu_ci=(measurement.mu_interval.low, measurement.mu_interval.high) if enough else None,
        sigma_ci=(measurement.sigma_interval.low, measurement.sigma_interval.high) if enough else None,
        prompts=prompts,
        fingerprint=key,
        replayed=measurement.replayed,
        confirmed=measurement.confirmed,
    )


def _disagreement_warning(stats: SamplingStats, decoded: DecodedStats, threshold: float, *, own_output: str | None = None) -> str | None:
    """One line when the decoded μ and the μ implied by α differ by more than `threshold`,
    with what can explain it. `own_output` names the verifier when it is not the target (its
    decoded run follows its own output, while α is measured on the target's)."""
    implied = next((item for item in stats.implied if item.k == decoded.k), None)
    if implied is None:
        return None
    gap = (implied.mu - decoded.mu) / decoded.mu
    if abs(gap) <= threshold:
        return None
    interval = "" if decoded.mu_ci is None else f" [{decoded.mu_ci[0]:.2f}, {decoded.mu_ci[1]:.2f}]"
    line = (
        f"K={decoded.k}: decoded mu {decoded.mu:.2f}{interval} vs {implied.mu:.2f} implied by alpha "
        f"{stats.alpha:.3f} ({gap:+.0%})"
    )
    reasons = []
    if decoded.mu_ci is not None and decoded.mu_ci[0] <= implied.mu <= decoded.mu_ci[1]:
        reasons.append("inside the decoded interval, so sampling noise can explain it")
    if implied.mu_positional is not None and abs(implied.mu_positional - decoded.mu) <= threshold * decoded.mu:
        reasons.append(f"the positional mu {implied.mu_positional:.2f} agrees: acceptance varies along sequences")
    if own_output is not None:
        reasons.append(f"the decoded run follows {own_output}'s own output, alpha the target's")
    return line + ("; " + "; ".join(reasons) if reasons else "")


def refresh_warnings(stats: SamplingStats, threshold: float, own_output: str | None, prompts: int | None = None) -> SamplingStats:
    """`stats` with its warnings recomputed from its decoded and implied μ, and from the sample
    sizes (`prompts`: what α was measured over, when known)."""
    lines = [_disagreement_warning(stats, decoded, threshold, own_output=own_output) for decoded in stats.decoded]
    alpha_prompts = prompts if stats.alpha_ci is None else None
    lines += interval_warnings([(d.k, d.prompts) for d in stats.decoded if d.mu_ci is None], alpha_prompts)
    return replace(stats, warnings=tuple(line for line in lines if line is not None))
