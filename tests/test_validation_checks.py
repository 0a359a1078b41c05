"""What validate and the demo judge (validation.results, docs/validation.md "How it judges"): the
four checks are facts about the user's run, the headline's first sentence says whether the
prediction held and, when not, which factor of the error moved; validate writes into a folder of
its own. Built from run records with known times, so every expected figure is arithmetic."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from polyplan.formats.plan import ChainCheck, ExactRecord, PaperRecord, PlannedChain
from polyplan.formats.validation_report import ReportSettings
from polyplan.validation.reporting import write_report
from polyplan.validation.results import (
    CHECK_FASTEST,
    CHECK_GREEDY,
    CHECK_HOLDS,
    CHECK_NO_WORSE,
    DIAGNOSTIC_CHECKED,
    DIAGNOSTIC_EXACT,
    ROLE_RECOMMENDED,
    ROLE_TARGET_ONLY,
    ChainSpec,
    RunRecord,
    Validation,
    headline,
    summarise_chain,
)

from test_validation_paired import _validate

SETTINGS = ReportSettings(sampling="greedy", prompts=8, prompt_sources=("x",), dropped_prompts=(), truncated_prompts=0,
                          new_tokens=4, repeats=3, seed=0, device="cpu", plan_device="cpu", plan="plan.json", wall_time_s=1.0)


def _printed(chains, head, tmp_path: Path) -> str:
    """What `polyplan validate` prints for these chains (the report written into `tmp_path`)."""
    from polyplan.cli.commands.validate import result_lines

    validation = Validation(chains=tuple(chains), headline=head, settings=SETTINGS, notes=())
    return "\n".join(result_lines(validation, write_report(validation, tmp_path / "report")))


def test_a_run_whose_predictions_all_hold_prints_no_failing_check(tmp_path):
    """The issue's user: a correct 1.76x plan (predicted 1.75x [1.60, 1.90]) is not told it failed."""
    chains, head = _validate(1.76, 1.70)
    assert all(chain.prediction_holds for chain in chains if len(chain.chain) > 1)
    assert [check.name for check in head.checks] == [CHECK_HOLDS, CHECK_FASTEST, CHECK_GREEDY, CHECK_NO_WORSE]
    assert [check.passed for check in head.checks] == [True, True, True, None]  # no self-check in this plan
    out = _printed(chains, head, tmp_path)
    assert "does not hold" not in out and "NOT met" not in out and "2x over" not in out and "1.15x" not in out
    assert f"  holds: {CHECK_HOLDS} (3 chain(s) hold)" in out
    assert f"  undecided: {CHECK_NO_WORSE} (the plan ran no self-check" in out
    assert head.record.line.startswith("polyplan's prediction held: recommended t > d (K = [4]) measured 1.7")
    assert ", predicted 1.75x [1.60, 1.90], " in head.record.line
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Checks" in report and "NOT met" not in report and "## Diagnostics" in report


def test_a_prediction_outside_its_interval_fails_the_check_naming_the_chain(tmp_path):
    chains, head = _validate(1.45, 1.70)  # recommended: 1.45x measured against 1.75x [1.60, 1.90]
    measured = chains[0].measured_speedup
    check = head.find(CHECK_HOLDS)
    assert check.passed is False and check.value == 1.0
    assert check.detail == f"t > d measured {measured:.2f}x outside 1.75x [1.60, 1.90]"  # the alternative holds
    out = _printed(chains, head, tmp_path)
    assert f"  does not hold: {CHECK_HOLDS} (t > d measured {measured:.2f}x outside 1.75x [1.60, 1.90])" in out
    inside, head = _validate(1.55, 1.70, interval=(1.2, 2.3))  # inside a wide interval, but 13% from the point
    assert head.find(CHECK_HOLDS).detail == (f"t > d measured {inside[0].measured_speedup:.2f}x inside 1.75x [1.20, 2.30] "
                                             f"but {inside[0].judged_error:+.1%} from its point")


def test_a_greedy_difference_fails_its_check_and_sampling_leaves_it_undecided():
    chains, _ = _validate(1.76, 1.70)
    lossy = replace(chains[1], measured=replace(chains[1].measured, greedy_equal=False, first_difference="prompt 2: token 3"))
    check = headline([chains[0], lossy, chains[2]]).find(CHECK_GREEDY)
    assert check.passed is False and check.detail == "t > d > n differs: prompt 2: token 3"
    tie = replace(lossy, measured=replace(lossy.measured, near_tie="the target's top two within its noise"))
    check = headline([chains[0], tie, chains[2]]).find(CHECK_GREEDY)
    assert check.passed is True and "t > d > n parted at a near-tie (the target's top two within its noise)" in check.detail
    sampled = [replace(chain, measured=replace(chain.measured, greedy_equal=None)) for chain in chains]
    check = headline(sampled).find(CHECK_GREEDY)
    assert check.passed is None and check.detail.startswith("sampling")


# ------------------------------------------------------------------ chains with a known cost split

PROMPTS, REPEATS, TOKENS = 4, 2, 8
TARGET_STEP = 0.008  # target-only decoding, seconds per token (the plan's and the run's)


def _plan(exact: float, interval, check: ChainCheck | None = None) -> PlannedChain:
    """t > d at K = 4 as planned: 0.4 target passes of 10 ms and 1 drafter pass of 1 ms per token."""
    return PlannedChain(
        chain=("t", "d"), block_sizes=(4,),
        exact=ExactRecord(speedup=exact, acceptances=(0.8,), forwards_per_token=(0.4, 1.0), tokens_per_verification=(2.5,),
                          drafted_per_verification=(4.0,), time_per_token_s=(0.004, 0.001), overhead_per_token_s=0.0,
                          interval=interval),
        paper=PaperRecord(speedup=exact, phi_per_token=(0.4, 1.0), mean_lengths=(2.5,)), check=check,
    )


def _record(chain: int, repeat: int, prompt: int, passes: tuple[int, ...], seconds: tuple[float, ...]) -> RunRecord:
    """A run of TOKENS tokens whose time is its passes' and nothing else (no loop time)."""
    verifying = len(passes) - 1
    return RunRecord(chain=chain, repeat=repeat, prompt=prompt, decode_s=sum(seconds), prefill_s=0.01,
                     token_ids=tuple(range(TOKENS)), forward_passes=passes, forward_seconds=seconds,
                     tokens_per_verification=((TOKENS // passes[0],) * passes[0],) * verifying + ((),),
                     tokens_drafted=(4 * passes[0],) * verifying + (0,), tokens_accepted=(TOKENS - passes[0],) * verifying + (0,))


def _known(target_passes: int, drafter_pass_s: float, *, exact: float = 1.6, interval=(1.5, 1.7),
           check: ChainCheck | None = None):
    """The chain validated against target-only decoding, with the cost split the arguments give:
    TOKENS tokens with `target_passes` target passes (the plan: 0.4 a token) and a drafter pass of
    `drafter_pass_s` (the plan: 1 ms); the plan's target-only step is the run's."""
    grid = [(r, p) for r in range(REPEATS) for p in range(PROMPTS)]
    base = [_record(1, r, p, (TOKENS,), (TOKENS * TARGET_STEP,)) for r, p in grid]
    runs = [_record(0, r, p, (target_passes, TOKENS), (target_passes * 0.010, TOKENS * drafter_pass_s)) for r, p in grid]
    spec = ChainSpec(_plan(exact, interval, check), (ROLE_RECOMMENDED,), 1)
    alone = ChainSpec(PlannedChain(
        chain=("t",), block_sizes=(),
        exact=ExactRecord(speedup=1.0, acceptances=(), forwards_per_token=(1.0,), tokens_per_verification=(),
                          drafted_per_verification=(), time_per_token_s=(TARGET_STEP,), interval=(1.0, 1.0)),
        paper=PaperRecord(speedup=1.0, phi_per_token=(1.0,), mean_lengths=()),
        check=None if check is None else ChainCheck(1.0, 1.0, 1.0, 1.0, (1.0, 1.0), 1.0),  # as a checked plan has it
    ), (ROLE_TARGET_ONLY,), 2)
    chains = [summarise_chain(spec, runs, base, greedy=True, predicted_baseline=TARGET_STEP),
              summarise_chain(alone, base, base, greedy=True, predicted_baseline=TARGET_STEP)]
    return chains, headline(chains)


def test_the_known_chains_have_the_cost_split_they_were_built_with():
    """The fixture's own control: fewer accepted tokens move passes per token only, a slower drafter seconds per pass only."""
    (accepted_less, _), _ = _known(target_passes=4, drafter_pass_s=0.001)
    split = accepted_less.cost_split
    assert accepted_less.measured_speedup == pytest.approx(TARGET_STEP / 0.006)
    assert split.forwards == pytest.approx(0.2) and split.per_pass == pytest.approx(0.0, abs=1e-12)
    assert split.total == pytest.approx(0.2) and split.baseline == pytest.approx(0.0, abs=1e-12)
    (slower, _), _ = _known(target_passes=3, drafter_pass_s=0.002)  # 0.375 target passes a token: fewer than planned
    assert slower.cost_split.per_pass > 0.2 and slower.cost_split.forwards < 0


def test_the_headline_names_the_factor_that_moved():
    (chain, _), head = _known(target_passes=4, drafter_pass_s=0.001)  # acceptance fell: 0.5 target passes a token, not 0.4
    assert head.record.line.startswith(
        "polyplan's prediction did not hold: recommended t > d (K = [4]) measured 1.33x [1.33, 1.33], predicted 1.60x "
        "[1.50, 1.70], off by +20.0% (outside its interval), mostly in passes per token (+20.0%): the drafters were "
        "accepted less on these prompts than on the profiled ones. Paper's Lemma 3.1 1.60x (+20.0%)")
    (chain, _), head = _known(target_passes=3, drafter_pass_s=0.002)  # the drafter's passes took twice the plan's
    assert f"mostly in seconds per pass of d ({chain.cost_split.per_pass:+.1%}): its passes took longer inside the chain" \
        in head.record.line
    # the exact model right, the self-check's C = 0.8 moved it to 2.0x: the correction is what moved
    (chain, _), head = _known(target_passes=4, drafter_pass_s=0.001, exact=1.6 / 1.2, interval=(1.2, 1.5),
                              check=ChainCheck(0.8, 0.75, 0.85, 1.6 / 1.2 / 0.8, (1.5, 1.9), 1.7))
    assert chain.errors.exact == pytest.approx(0.0, abs=1e-9) and chain.checked_error == pytest.approx(0.25)
    assert ("predicted 1.67x [1.50, 1.90] (checked), off by +25.0% (outside its interval), mostly in the self-check's "
            "correction (+25.0%): its C = 0.800 [0.750, 0.850] moved the exact model's prediction up, and the exact model "
            "was off by +0.0%. Exact model 1.33x [1.20, 1.50] (+0.0%)") in head.record.line
    held, head = _known(target_passes=4, drafter_pass_s=0.001, exact=1.6 / 1.2, interval=(1.2, 1.5))
    assert head.record.line.startswith("polyplan's prediction held: ") and "mostly" not in head.record.line


@pytest.mark.parametrize("scale, holds", [(0.9, False), (1.1, True)], ids=["beyond C's uncertainty", "within it"])
def test_the_self_check_fails_when_it_made_a_prediction_worse_than_its_own_uncertainty(scale, holds):
    """The exact model right (1.33x), C = 0.92 moves it to 1.45x (+8.7%, inside its interval and
    within 10%: the prediction holds); C's interval, as wide as `scale` times that worsening,
    decides: the check holds exactly when the worsening fits in it."""
    c = 0.92
    worsened = 1 / c - 1  # |checked error| - |exact error| with the exact model exactly right
    low, high = c * math.exp(-worsened * scale), c * math.exp(worsened * scale * 0.5)  # the wider side is low's
    check = ChainCheck(c, low, high, 1.6 / 1.2 / c, (1.2, 1.9), 1.5)
    (chain, _), head = _known(target_passes=4, drafter_pass_s=0.001, exact=1.6 / 1.2, interval=(1.2, 1.5), check=check)
    assert chain.predicted.check_uncertainty == pytest.approx(worsened * scale)
    assert chain.check_worsened_by == pytest.approx(worsened)
    verdict = head.find(CHECK_NO_WORSE)
    assert verdict.passed is holds and verdict.value == pytest.approx(worsened * (1 - scale))
    assert "t > d checked +8.7% against exact +0.0%, 8.7 points further off" in verdict.detail
    if holds:  # target-only decoding's C = 1 [1, 1] predicts nothing: it is not what the check judges
        assert verdict.detail.startswith("1 chain(s); the closest to failing: t > d checked")
    assert head.find(CHECK_HOLDS).passed is True  # both inside their intervals: only the fourth check sees it
    closer = ChainCheck(1 / c, 1 / c * 0.99, 1 / c * 1.01, 1.6 / 1.2 * c, (1.0, 1.4), 1.2)  # the point moved the wrong way, but...
    (_, _), head = _known(target_passes=4, drafter_pass_s=0.001, exact=1.6 / 1.2 * 1.3, interval=(1.5, 1.9), check=closer)
    assert head.find(CHECK_NO_WORSE).passed is True  # ...from +30% to +19.6%: closer than the exact model


def test_the_diagnostics_keep_the_errors_against_ten_percent_without_judging_the_run():
    chains, head = _validate(1.55, 1.70, interval=(1.2, 2.3))  # 13% off the point: a diagnostic says so
    exact = head.find(DIAGNOSTIC_EXACT)
    assert exact.passed is False and exact.detail.startswith("worst: t > d +")
    assert exact not in head.checks and head.find(DIAGNOSTIC_CHECKED).passed is None


def test_validate_writes_into_a_folder_of_its_own_and_no_command_defaults_to_a_package_room():
    """Run from the repository root, `--out`'s default must not be one of the package's folders."""
    import typer.main

    from polyplan.cli.app import app

    root = Path(__file__).resolve().parent.parent
    rooms = {"formats", "planner", "decoder", "models", "profiler", "validation", "engines", "zoo", "pipeline", "cli"}
    assert rooms <= {path.name for path in root.iterdir() if path.is_dir()}  # the control: they are the repository's

    def commands(group, path=()):
        for name, command in getattr(group, "commands", {}).items():
            yield from commands(command, (*path, name))
        if not getattr(group, "commands", None):
            yield path, group

    defaults = {path: param.default for path, command in commands(typer.main.get_command(app))
                for param in command.params if param.name == "out" and param.default is not None}
    assert defaults[("validate",)] == Path("polyplan-validation")
    assert not [path for path, default in defaults.items() if Path(default).parts[0] in rooms]
