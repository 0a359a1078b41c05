"""The short table a profiling run ends with: T_i(1) per model, α and μ(K*) per pair.

K* minimises the exact cost model's time per token of the two-model chain (verifier, drafter),
searched in 1 … `k_max` (default: `planner.search.default_k_max`). μ(K*) is the decoded μ when one
was measured at K*, else the μ that α implies (marked "(α)").
"""

from __future__ import annotations

from dataclasses import dataclass

from polyplan.planner.paper.capped_geometric import relative_variability
from polyplan.planner.search import default_k_max
from polyplan.planner.exact.cost_model import predict_chain
from polyplan.planner.exact.latency import curve_from_profile
from polyplan.planner.exact.ngram_replay import draft_rounds, ngram_simple_sizes, target_streams
from polyplan.formats.profile import Profile


@dataclass(frozen=True)
class ModelRow:
    """One model: T(1) (seconds, averaged over context lengths), its worst relative IQR, and the
    machine floor's (None when the profile does not record it)."""

    name: str
    step_s: float
    relative_iqr: float
    repeats: int | None
    reference_relative_iqr: float | None = None


@dataclass(frozen=True)
class DecodedRow:
    """A decoded μ beside what α implies, and σ/μ (Theorem 3.3's relative variability) measured
    and under i.i.d. acceptance at rate α."""

    k: int
    mu: float
    implied_mu: float | None
    positional_mu: float | None
    relative_variability: float | None
    iid_relative_variability: float


@dataclass(frozen=True)
class PairRow:
    """One pair under one sampling mode."""

    verifier: str
    drafter: str
    sampling: str
    alpha: float
    alpha_ci: tuple[float, float] | None
    best_k: int
    mu_best: float
    mu_best_source: str  # "decoded", "alpha" or "replay" (an ngram-simple drafter's rounds, planner.exact.ngram_replay)
    decoded: tuple[DecodedRow, ...]
    speedup: float  # exact-model speedup of the pair at K* over the verifier alone
    warnings: tuple[str, ...]


def model_rows(profile: Profile) -> tuple[ModelRow, ...]:
    """T(1) per model (as the planner reads it) and the largest IQR/median over contexts."""
    rows = []
    for model in profile.models:
        ones = [p for p in model.latency if p.k == 1]
        worst = max((p.iqr_s / p.median_s for p in ones), default=float("nan"))
        repeats = min((p.repeats for p in ones if p.repeats is not None), default=None)
        floor = None if model.timing is None else model.timing.reference_relative_iqr
        rows.append(ModelRow(model.name, curve_from_profile(model)(1), worst, repeats,
                             None if floor is None else float(floor)))
    return tuple(rows)


def pair_rows(profile: Profile, k_max: int | None = None) -> tuple[PairRow, ...]:
    """One row per (pair, sampling mode), in profile order."""
    if k_max is None:
        k_max = default_k_max(profile)
    curves = {model.name: curve_from_profile(model) for model in profile.models}
    rules, streams = ngram_simple_sizes(profile), target_streams(profile)
    rows = []
    for pair in profile.pairs:
        for mode, stats in pair.sampling.items():
            chain_curves = [curves[pair.verifier], curves[pair.drafter]]
            replayed = pair.drafter in rules and pair.verifier == profile.target and mode == "greedy" and bool(streams)
            if pair.drafter in rules and not replayed:
                continue  # a rule drafter is planned directly under the target at greedy only (planner.search)
            if replayed:  # its rounds replayed on the target's streams, as recommend reads them
                reads = {k: draft_rounds(streams, rules[pair.drafter], k) for k in range(1, k_max + 1)}
            else:
                reads = {k: stats.alpha for k in range(1, k_max + 1)}
            costs = {k: predict_chain([reads[k]], chain_curves, [k]) for k in range(1, k_max + 1)}
            best_k = min(costs, key=lambda k: (costs[k].cost_per_token, k))
            measured = stats.decoded_at(best_k)
            implied = {item.k: item for item in stats.implied}
            if measured is not None:
                mu_best, source = measured.mu, "decoded"
            else:
                mu_best, source = costs[best_k].tokens_per_verification[0], "replay" if replayed else "alpha"
            decoded = tuple(DecodedRow(d.k, d.mu, implied[d.k].mu if d.k in implied else None,
                                       implied[d.k].mu_positional if d.k in implied else None,
                                       None if d.sigma is None else d.sigma / d.mu, relative_variability(stats.alpha, d.k))
                            for d in stats.decoded)
            rows.append(PairRow(pair.verifier, pair.drafter, mode, stats.alpha, stats.alpha_ci, best_k, mu_best, source,
                                decoded, costs[best_k].speedup, tuple(stats.warnings)))
    return tuple(rows)


def summary_lines(profile: Profile, k_max: int | None = None) -> list[str]:
    """The closing table, as text lines."""
    lines = [
        f"Models on {profile.device} (target {profile.target}); machine floor: IQR/median of a fixed "
        "workload timed in the same rounds:",
        f"  {'model':<22} {'T(1) ms':>9} {'IQR/median':>10} {'machine floor':>13}",
    ]
    for row in model_rows(profile):
        floor = "-" if row.reference_relative_iqr is None else f"{row.reference_relative_iqr:.1%}"
        lines.append(f"  {row.name[:22]:<22} {1e3 * row.step_s:>9.3f} {row.relative_iqr:>10.1%} {floor:>13}")
    rows = pair_rows(profile, k_max)
    if not rows:
        lines.append("No pairs (no candidate is cheaper than another).")
        return lines
    lines += [
        "",
        "Pairs (verifier <- drafter); K* minimises the exact model's time per token; "
        "decoded mu vs mu implied by alpha ((r): an ngram-simple drafter's rounds replayed on the target's streams):",
        f"  {'pair':<34} {'mode':<7} {'alpha':>6} {'95% CI':>13} {'K*':>3} {'mu(K*)':>10} {'speedup':>8}  decoded vs implied",
    ]
    flagged = []
    for row in rows:
        interval = "" if row.alpha_ci is None else f"[{row.alpha_ci[0]:.3f},{row.alpha_ci[1]:.3f}]"
        mu = f"{row.mu_best:.2f}" + {"decoded": "", "replay": "(r)"}.get(row.mu_best_source, "(α)")
        comparison = "  ".join(
            f"K{d.k}: {d.mu:.2f}/" + ("-" if d.implied_mu is None else f"{d.implied_mu:.2f}") for d in row.decoded
        ) or "-"
        mark = " !" if row.warnings else ""
        label = f"{row.verifier} <- {row.drafter}"
        lines.append(
            f"  {label[:34]:<34} {row.sampling:<7} {row.alpha:>6.3f} {interval:>13} {row.best_k:>3} {mu:>10} "
            f"{row.speedup:>7.2f}x  {comparison}{mark}"
        )
        flagged += [f"  ! {label} [{row.sampling}] {warning}" for warning in row.warnings]
    if flagged:
        lines += ["", "Decoded and distribution-based mu disagree (> threshold) for:"] + flagged
    return lines
