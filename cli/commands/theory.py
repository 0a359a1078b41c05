"""`polyplan theory …`: the paper's formulas next to the exact ones (no models, no torch)."""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from polyplan.cli.support import echo_json, fails_cleanly
from polyplan.formats.sampling import SamplingMode
from polyplan.planner import (ChainPlan, InsertionAnalysis, TheoryReport, analyze_insertion, capped_geometric_mean,
                              capped_geometric_variance, paper_a2_variance, paper_eq3_mean, paper_eq3_mean_literal,
                              paper_eq4_relative_variability, paper_sigma2, relative_variability, theory_report)
from polyplan.planner.paper.capped_geometric import check_acceptance, check_block_size
from polyplan.formats.profile import read_profile

app = typer.Typer(help="The paper's theory (Lemma 3.1, Theorems 3.2/3.3, eq. 3, Appendix A) beside the exact model.", no_args_is_help=True)

_EXAMPLE_PROFILE = "data/paper_table1_profile.json"


def _number(value: float | None) -> str:
    if value is None:
        return "n/a (needs --alpha)"
    if isinstance(value, float) and math.isnan(value):
        return "undefined"
    return f"{value:.6g}"


def _insertion_payload(analysis: InsertionAnalysis) -> dict[str, Any]:
    """The JSON object of a Theorem 3.2 analysis (the CLI's --json shape)."""
    payload: dict[str, Any] = {
        "condition1": vars(analysis.condition1).copy(),
        "condition2": vars(analysis.condition2).copy(),
        "condition2_rhs_per_alpha": analysis.condition2_rhs_per_alpha,
        "assumptions_hold": analysis.assumptions_hold,
        "assumptions": {
            "l1_new_gt_l1": analysis.assumption_l1_grows,
            "two_l2_new_gt_l1": analysis.assumption_l2_doubled_exceeds_l1,
            "ceiling": analysis.ceiling,
            "ceiling_at_least_two": analysis.ceiling_at_least_two,
        },
        "theorem_guarantees_gain": analysis.theorem_guarantees_gain,
        "verdict": analysis.verdict,
        "verdict_basis": analysis.verdict_basis,
    }
    if analysis.alpha_scale is not None:
        payload.update(alpha=analysis.alpha_scale, exact_difference=analysis.exact_difference,
                       paper_bound_difference=analysis.paper_bound_difference, two_model_time=analysis.two_model_time,
                       three_model_time=analysis.three_model_time)
    return payload


def _insertion_lines(analysis: InsertionAnalysis, unit: str = "") -> list[str]:
    c1, c2 = analysis.condition1, analysis.condition2
    holds = {True: "holds", False: "fails", None: "needs --alpha"}
    rhs2 = f"{c2.rhs:.4g}" if c2.rhs is not None else f"{analysis.condition2_rhs_per_alpha:.4g}*alpha"
    lines = [
        f"  condition 1: T2'/T1 < 2E[L2]'(1/E[L1] - 1/E[L1]')  lhs {c1.lhs:.4g}  rhs {c1.rhs:.4g}  {holds[c1.holds]}",
        f"  condition 2: T2'/T2 < alpha(E[L1]/(2E[L2]') - 1)  lhs {c2.lhs:.4g}  rhs {rhs2}  {holds[c2.holds]}",
        f"  assumptions: E[L1]' > E[L1] {'yes' if analysis.assumption_l1_grows else 'NO'}, "
        f"2E[L2]' > E[L1] {'yes' if analysis.assumption_l2_doubled_exceeds_l1 else 'NO'} "
        f"(as printed: {'hold' if analysis.assumptions_hold else 'fail'}); "
        f"ceil(E[L1]'/E[L2]') = {analysis.ceiling} (the proof uses >= 2)",
    ]
    if analysis.alpha_scale is not None:
        lines.append(
            f"  alpha = {analysis.alpha_scale:g}: eq.1 (two models) {analysis.two_model_time:.6g}{unit}, "
            f"eq.2 (three) {analysis.three_model_time:.6g}{unit} per token; "
            f"exact eq.2 - eq.1 = {analysis.exact_difference:+.6g}{unit} "
            f"(proof's bound with ceil -> 2: {analysis.paper_bound_difference:+.6g}{unit})"
        )
    lines.append(f"  verdict: {analysis.verdict} (from {analysis.verdict_basis.replace('_', ' ')})")
    return lines


@app.command("insertion")
@fails_cleanly
def insertion(
    t1: Annotated[float, typer.Option("--t1", help="T_1: forward time of the target (any unit, > 0).")],
    t2: Annotated[float, typer.Option("--t2", help="T_2 = T_3': forward time of the old drafter.")],
    t2_new: Annotated[float, typer.Option("--t2-new", help="T_2': forward time of the inserted model.")],
    l1: Annotated[float, typer.Option("--l1", help="E[L_1]: mean acceptance length, target over old drafter.")],
    l1_new: Annotated[float, typer.Option("--l1-new", help="E[L_1]': target over the new sub-chain.")],
    l2_new: Annotated[float, typer.Option("--l2-new", help="E[L_2]': inserted model over the old drafter.")],
    alpha: Annotated[Optional[float], typer.Option("--alpha", help="The paper's scaling factor α (> 0; not an acceptance rate).")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Theorem 3.2: does inserting M_2' between M_1 and the drafter M_2 help?"""
    analysis = analyze_insertion(t1=t1, t2=t2, t2_new=t2_new, l1=l1, l1_new=l1_new, l2_new=l2_new, alpha_scale=alpha)
    if json_output:
        echo_json(_insertion_payload(analysis))
        return
    typer.echo("Theorem 3.2 (insert M2' between M1 and the drafter; times per token, N = 1)")
    typer.echo("\n".join(_insertion_lines(analysis)))


def _capped_geometric_payload(acceptance: float, k: int) -> dict[str, Any]:
    """Exact moments of tokens per verification beside the paper's printed formulas."""
    a = check_acceptance(acceptance, "alpha")
    k = check_block_size(k, "k")
    return {
        "acceptance": a,
        "k": k,
        "exact": {
            "mean": capped_geometric_mean(a, k),
            "variance": capped_geometric_variance(a, k),
            "sigma_over_mu": relative_variability(a, k),
        },
        "paper": {
            "eq3_mean_alpha_as_acceptance": paper_eq3_mean(a, k),
            "eq3_mean_alpha_as_failure": paper_eq3_mean_literal(a, k),
            "a2_variance_p_1_minus_alpha_n_k_plus_1": paper_a2_variance(1.0 - a, k + 1) if 0.0 < 1.0 - a < 1.0 else math.nan,
            "sec31_sigma2_alpha_n_k": paper_sigma2(a, k),
            "eq4_sigma_over_mu_alpha_n_k": paper_eq4_relative_variability(a, k),
        },
    }


@app.command("capped-geometric")
@fails_cleanly
def capped_geometric(
    alpha: Annotated[float, typer.Option("--alpha", help="Per-token ACCEPTANCE rate, in [0, 1).")],
    k: Annotated[int, typer.Option("--k", help="Block size K (drafted tokens per verification), >= 1.")],
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Tokens per verification L = min(A, K) + 1: exact mean/variance vs the paper's formulas."""
    payload = _capped_geometric_payload(alpha, k)
    if json_output:
        echo_json(payload)
        return
    exact, paper = payload["exact"], payload["paper"]
    rows = [
        ("E[L] exact (sympy-derived)", exact["mean"]),
        ("eq. 3, alpha = acceptance, n = K", paper["eq3_mean_alpha_as_acceptance"]),
        ("eq. 3, alpha = failure = 1 - acceptance", paper["eq3_mean_alpha_as_failure"]),
        ("Var[L] exact (sympy-derived)", exact["variance"]),
        ("A.2 Var(N), p = 1 - acceptance, n = K + 1", paper["a2_variance_p_1_minus_alpha_n_k_plus_1"]),
        ("sec. 3.1 sigma^2, alpha = acceptance, n = K", paper["sec31_sigma2_alpha_n_k"]),
        ("sigma/mu exact", exact["sigma_over_mu"]),
        ("eq. 4 sigma/mu, alpha = acceptance, n = K", paper["eq4_sigma_over_mu_alpha_n_k"]),
    ]
    typer.echo(f"Capped geometric, acceptance = {payload['acceptance']:g}, K = {payload['k']}")
    for name, value in rows:
        typer.echo(f"  {name:44} {_number(value):>14}")


def _chain_lines(plan: ChainPlan) -> list[str]:
    paper, exact = plan.paper, plan.exact
    return [
        f"  {plan.label()}   K = {list(plan.block_sizes)}",
        f"    E[L_i] {['%.4g (%s)' % item for item in zip(paper.mean_lengths, paper.length_sources)]}",
        f"    Lemma 3.1: T/N = {paper.time_per_token * 1e3:.4g} ms/token, phi_i/N = "
        f"{[round(value, 4) for value in paper.phi_per_token]}, speedup {paper.speedup:.3f}x",
        f"    exact model: {exact.cost_per_token * 1e3:.4g} ms/token, forwards/token = "
        f"{[round(value, 4) for value in exact.forwards_per_token]}, speedup {exact.speedup:.3f}x",
    ]


def _report_lines(report: TheoryReport) -> list[str]:
    """The human-readable theory report."""
    lines = [
        f"Theory report for {report.source} (sampling {report.sampling}, K = {report.block_size}, paper's alpha = K)",
        "",
        "Models, T(1): " + ", ".join(f"{name} {seconds * 1e3:.4g} ms" for name, seconds in report.times),
        "",
    ]
    if report.note is not None:
        lines.append(f"note: {report.note}")
    if report.two_model is not None:
        lines.append("Lemma 3.1 (as printed) and the exact model, per emitted token:")
    for plan in ((report.two_model,) if report.two_model is not None else ()) + report.three_model:
        lines += _chain_lines(plan)
    if report.three_model:
        lines.append("  (for 3+ models Lemma 3.1's phi_i/N are not the forward counts of the staged recursion: "
                     "compare phi_i/N with the exact forwards/token)")
    for item in report.insertions:
        lines += ["", f"Theorem 3.2: insert {item.model} (T in seconds)"]
        lines += _insertion_lines(item.with_alpha, " s")
        lines.append(f"  without alpha, the printed conditions alone say: {item.theorem_only.verdict}")
    if report.bounds:
        lines += ["", "Bounds before measurement (latency curves only, every draft accepted; docs/cost-model.md):"]
        lines += [f"  {item.text()}" for item in report.bounds]
    lines += ["", "Errata (printed vs exact):"]
    for erratum in report.errata:
        lines += [f"  {erratum.name}: printed {_number(erratum.printed)}, exact {_number(erratum.exact)}",
                  f"      {erratum.note}"]
    lines += ["", "Exact model, best block sizes (K in 1..8), ranked:"]
    lines += [f"  {plan.exact_speedup:7.3f}x exact  {plan.paper_speedup:7.3f}x paper  {plan.label()}  "
              f"K = {list(plan.block_sizes)}" for plan in report.search.ranked]
    return lines


def _report_payload(report: TheoryReport) -> dict[str, Any]:
    def chain(plan: ChainPlan) -> dict[str, Any]:
        return {
            "chain": list(plan.chain),
            "block_sizes": list(plan.block_sizes),
            "mean_lengths": list(plan.paper.mean_lengths),
            "lemma31_time_per_token_s": plan.paper.time_per_token,
            "lemma31_phi_per_token": list(plan.paper.phi_per_token),
            "paper_speedup": plan.paper.speedup,
            "exact_cost_per_token_s": plan.exact.cost_per_token,
            "exact_forwards_per_token": list(plan.exact.forwards_per_token),
            "exact_speedup": plan.exact.speedup,
        }

    return {
        "source": report.source,
        "sampling": report.sampling,
        "block_size": report.block_size,
        "times_s": dict(report.times),
        "two_model": None if report.two_model is None else chain(report.two_model),
        "three_model": [chain(plan) for plan in report.three_model],
        "insertions": {item.model: _insertion_payload(item.with_alpha) for item in report.insertions},
        "errata": [vars(erratum).copy() for erratum in report.errata],
        "ranked": [chain(plan) for plan in report.search.ranked],
        "pair_bounds": [{
            "verifier": item.bound.verifier,
            "drafter": item.bound.drafter,
            "speedup": item.bound.speedup,
            "block_size": item.bound.block_size,
            "cost_ratio": item.bound.cost_ratio,
            "can_pay": item.bound.can_pay,
            "leader": None if item.leader is None else {"chain": list(item.leader.chain), "exact_speedup": item.leader.exact_speedup},
            "acceptance_to_reach_leader": item.acceptance,
            "at_block_size": item.block_size,
        } for item in report.bounds],
        "note": report.note,
    }


@app.command("report")
@fails_cleanly
def report(
    profile: Annotated[Optional[Path], typer.Option("--profile", help="Profile JSON (default: the paper's Table 1 example).")] = None,
    sampling: Annotated[Optional[str], typer.Option(
        "--sampling", help="Profile sampling key: 'greedy' or 't<temperature>' (default: greedy, or the profile's own "
        "mode when it has no greedy entries).")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """The theory report: Lemma 3.1, Theorem 3.2, the errata and exact speedups on a profile."""
    from polyplan.planner.profile_sampling import default_sampling

    if sampling is not None:
        SamplingMode.parse(sampling, "--sampling")  # a bad key is one line before any file is read
    if profile is None:
        with resources.as_file(resources.files("polyplan") / _EXAMPLE_PROFILE) as path:
            loaded = read_profile(path)
        source = "the paper's Table 1 (shipped example profile)"
    else:
        loaded = read_profile(profile)
        source = str(profile)
    key, note = default_sampling(loaded, sampling)
    result = theory_report(loaded, source=source, sampling=key)
    if note is not None:  # once reported: a run that fails prints its one error line only
        typer.echo(f"note: {note}", err=True)
    if json_output:
        echo_json(_report_payload(result))
        return
    typer.echo("\n".join(_report_lines(result)))
