"""One profiling entry point: `profile` then `recommend --profile` plans exactly as `recommend
--candidates` does on the same cached profile (issue 12: the two paths gave 2.05x and 1.77x).

Tiny local family (`conftest.write_candidate_workspace`), greedy only, short settings."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import write_candidate_workspace
from polyplan.cli.app import app
from polyplan.formats.profile import read_profile

pytestmark = pytest.mark.usefixtures("single_thread", "short_calibrations")

PROFILE_FAST = [
    "--new-tokens", "8", "--latency-ks", "1,2,4", "--context-lengths", "8,16", "--repeats", "3", "--warmup", "1", "--noise-budget", "0",
    "--decoded-prompts", "2", "--block-sizes", "2", "--temperatures", "0", "--threads", "1",
]
# What a plan records about where it came from; everything else is the plan itself.
PROVENANCE = {"profile", "candidates", "self_check"}  # self_check: the --no-check record


def _invoke(*args: str):
    return CliRunner().invoke(app, [str(arg) for arg in args])


@pytest.fixture(scope="module")
def profiled(tmp_path_factory, short_calibrations) -> Path:
    root = write_candidate_workspace(tmp_path_factory.mktemp("one_profile"))
    result = _invoke("profile", "--candidates", root / "models.yaml", "--prompts", root / "prompts.jsonl",
                     "--out", root / "profile.json", *PROFILE_FAST)
    assert result.exit_code == 0, result.output
    return root


def test_profile_measures_everything_the_exact_model_reads(profiled):
    profile = read_profile(profiled / "profile.json")
    assert set(profile.loop_overhead) == {"greedy"}
    loop = profile.loop_overhead["greedy"]
    assert loop.per_step_s >= 0 and loop.per_round_s >= 0 and loop.fingerprint
    assert profile.acceptance_runs["greedy"].pairs
    assert set(profile.switch_costs.models) == {"target", "small", "ngram"} and profile.switch_costs.fingerprint
    assert not profile.meta  # the profiler's records are typed fields; meta is the user's


def test_profile_then_recommend_plans_as_recommend_candidates_does(profiled, tmp_path):
    before = read_profile(profiled / "profile.json")
    from_profile = _invoke("recommend", "--profile", profiled / "profile.json", "--out", tmp_path / "a.json")
    assert from_profile.exit_code == 0, from_profile.output
    assert "none recorded" not in from_profile.stdout and "acceptance from the measured agreement runs" in from_profile.stdout
    from_candidates = _invoke("recommend", "--candidates", profiled / "models.yaml", "--profile", profiled / "profile.json",
                              "--prompts", profiled / "prompts.jsonl", "--out", tmp_path / "b.json", "--threads", "1",
                              "--no-check")  # the same planning; the self-check, which only --candidates runs, is tested apart
    assert from_candidates.exit_code == 0, from_candidates.output
    assert ": 0 entries measured" in from_candidates.stdout  # the same cached profile, nothing re-measured
    a, b = (json.loads((tmp_path / name).read_text()) for name in ("a.json", "b.json"))
    best_a, best_b = a["alternatives"][0], b["alternatives"][0]
    assert (best_a["chain"], best_a["block_sizes"]) == (best_b["chain"], best_b["block_sizes"])
    assert [alt["chain"] for alt in a["alternatives"]] == [alt["chain"] for alt in b["alternatives"]]
    assert best_a["exact"] == best_b["exact"] and a["alternatives"] == b["alternatives"]
    assert {key: value for key, value in a.items() if key not in PROVENANCE} == {
        key: value for key, value in b.items() if key not in PROVENANCE
    }
    after = read_profile(profiled / "profile.json")
    assert after.loop_overhead == before.loop_overhead and after.switch_costs == before.switch_costs


def test_a_profile_with_a_stale_loop_cost_is_completed_not_reused(profiled, tmp_path):
    """Negative control: a loop-overhead entry measured for something else is re-measured, so
    reuse above is the fingerprint holding, not the entries being left alone."""
    profile = json.loads((profiled / "profile.json").read_text())
    profile["loop_overhead"]["greedy"]["fingerprint"] = "sha256:stale"
    profile["switch_costs"]["fingerprint"] = "sha256:stale"
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(profile))
    result = _invoke("profile", "--candidates", profiled / "models.yaml", "--prompts", profiled / "prompts.jsonl",
                     "--out", stale, *PROFILE_FAST, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["measured"] == [] and report["loop_costs_measured"] == 2
    completed = read_profile(stale)
    assert completed.loop_overhead["greedy"].fingerprint not in (None, "sha256:stale")
    assert completed.switch_costs.fingerprint not in (None, "sha256:stale")


def test_a_device_given_for_the_candidates_places_every_model_but_the_ngram_drafter(profiled):
    """`--device` goes through `read_candidate_file` → `with_device` (which walks each derive
    chain to keep a split model where accelerate put it)."""
    from polyplan.models.candidate_file import read_candidate_file

    read = read_candidate_file(profiled / "models.yaml", "meta")
    devices = {candidate.name: candidate.device for candidate in read.candidates.candidates}
    assert devices["target"] == devices["small"] == "meta" and devices["ngram"] != "meta"
    assert read.record["device"] == "meta"
    assert {c.name: c.device for c in read_candidate_file(profiled / "models.yaml").candidates.candidates}["target"] != "meta"


def test_recommend_resumes_a_profile_with_the_prompts_and_threads_it_was_measured_with(profiled, tmp_path):
    """Issue 11: `recommend --profile P --candidates M` without --prompts and --threads took the
    built-in prompts and every core, so it silently measured the whole profile again."""
    import torch

    recorded = read_profile(profiled / "profile.json").profiler
    assert recorded.prompt_file == str((profiled / "prompts.jsonl").resolve()) and not recorded.raw_prompts
    torch.set_num_threads(2)  # as a fresh process on a 2-core machine; the profile was timed with 1
    try:
        result = _invoke("recommend", "--candidates", profiled / "models.yaml", "--profile", profiled / "profile.json",
                         "--out", tmp_path / "plan.json")
    finally:
        torch.set_num_threads(1)
    assert result.exit_code == 0, result.output
    assert ": 0 entries measured" in result.stdout and "(1 thread)" in result.stdout


def test_a_profile_whose_prompt_file_is_gone_asks_for_prompts_in_one_line(profiled, tmp_path):
    profile = json.loads((profiled / "profile.json").read_text())
    profile["profiler"]["prompt_file"] = str(tmp_path / "gone.jsonl")
    moved = tmp_path / "profile.json"
    moved.write_text(json.dumps(profile))
    result = _invoke("recommend", "--candidates", profiled / "models.yaml", "--profile", moved, "--threads", "1")
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert f"was measured on the prompts in {tmp_path / 'gone.jsonl'}, which is not there any more; pass --prompts" in result.output


def test_the_readme_path_profile_recommend_generate_runs(profiled, tmp_path):
    """Issue 23, item 5: `profile` -> `recommend --profile` -> `generate --plan` needs no
    --candidates: the profile records the models.yaml it measured and the plan copies it."""
    assert read_profile(profiled / "profile.json").profiler.candidates["path"] == str((profiled / "models.yaml").resolve())
    plan = tmp_path / "plan.json"
    assert _invoke("recommend", "--profile", profiled / "profile.json", "--out", plan).exit_code == 0
    assert json.loads(plan.read_text())["candidates"]["path"] == str((profiled / "models.yaml").resolve())
    result = _invoke("generate", "--plan", plan, "--max-new-tokens", "6", "--json", "def add(a, b):")
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["token_ids"]) == 6
    # negative control: a profile made before it kept the record gives a plan generate cannot run
    old = json.loads((profiled / "profile.json").read_text())
    del old["profiler"]["candidates"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert _invoke("recommend", "--profile", tmp_path / "old.json", "--out", tmp_path / "old-plan.json").exit_code == 0
    refused = _invoke("generate", "--plan", tmp_path / "old-plan.json", "--max-new-tokens", "6", "def add(a, b):")
    assert refused.exit_code == 2 and "does not record its models.yaml" in refused.output


def test_a_profiling_run_reads_its_profile_once(profiled, monkeypatch):
    """Resuming a profile decodes the file once (it was up to six times: the foreign check,
    the resumed settings and prompts, the previous runs, forgetting latency, the run itself)."""
    import polyplan.formats.profile as profile_file
    import polyplan.profiler.checks as checks
    import polyplan.profiler.profile_cache as cache
    from polyplan.pipeline.stages import profile_candidates

    reads = []

    def counted(path, *args, **kwargs):
        reads.append(Path(path).name)
        return profile_file.read_profile(path, *args, **kwargs)

    for module in (cache, checks):
        monkeypatch.setattr(module, "read_profile", counted)
    result = profile_candidates(profiled / "models.yaml", profile_path=profiled / "profile.json", fresh_timings=True)
    assert reads == ["profile.json"]
    assert result.path == profiled / "profile.json" and result.reused > 0
    # fresh timings (what every demo asks for): each model's latency curve re-timed, acceptance reused
    retimed = sorted(step.label for step in result.run.measured if step.kind == "latency")
    assert retimed == ["latency ngram", "latency small", "latency target"]
    assert {step.kind for step in result.run.reused} >= {"alpha", "decoded"}
    # one row per stage, for the closing table: the re-timed latency took time, the reused acceptance none
    stages = dict(result.stage_seconds)
    assert list(stages) == ["latency", "alpha", "decoded", "agreement", "loop overhead", "HF overhead", "switch costs"]
    assert stages["latency"] > 0 and stages["alpha"] == 0 and stages["switch costs"] > 0
    # what recommend prints of them: the wall time, then each stage
    assert re.fullmatch(r"in \d+ s \(latency \d+ s, alpha 0 s, decoded 0 s, agreement \d+ s, loop overhead \d+ s, "
                        r"HF overhead \d+ s, switch costs \d+ s\)", result.stages_text)
