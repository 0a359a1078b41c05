"""Re-pricing a profile for another prompt file (`pipeline.reprice`): acceptance measured anew on
the new prompts, exactly as a profile of them from scratch measures it; every timing kept as the
original has it; resumable; the original never touched; bad input one line.

Tiny local family (`conftest.write_candidate_workspace`), short settings, greedy only."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import write_candidate_workspace
from polyplan.cli.app import app
from polyplan.formats.codec import encode
from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import read_profile

pytestmark = pytest.mark.usefixtures("single_thread", "short_calibrations")

PROFILE_FAST = [
    "--new-tokens", "8", "--latency-ks", "1,2,4", "--context-lengths", "8,16", "--repeats", "3", "--warmup", "1", "--noise-budget", "0",
    "--decoded-prompts", "2", "--block-sizes", "2", "--temperatures", "0", "--threads", "1",
]


def _invoke(*args):
    return CliRunner().invoke(app, [str(arg) for arg in args])


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_new_prompts(path: Path) -> Path:
    """Four prompts unlike the workspace's three: each repeats a short phrase, which prompt lookup
    accepts far more often than it does on the workspace's strided words."""
    lines = [json.dumps({"turns": [" ".join(f"w{(3 * i + j % 4) % 60 + 4}" for j in range(24))]}) for i in range(4)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def profiled(tmp_path_factory, short_calibrations) -> Path:
    """The workspace profiled on its own prompts (decoded runs included), and a new prompt file."""
    root = write_candidate_workspace(tmp_path_factory.mktemp("reprice"))
    result = _invoke("profile", "--candidates", root / "models.yaml", "--prompts", root / "prompts.jsonl",
                     "--out", root / "profile.json", *PROFILE_FAST)
    assert result.exit_code == 0, result.output
    _write_new_prompts(root / "new.jsonl")
    return root


@pytest.fixture(scope="module")
def repriced(profiled):
    from polyplan.pipeline.reprice import reprice_profile
    from polyplan.profiler.prompt_sets import prompt_set

    before = _digest(profiled / "profile.json")
    lines: list[str] = []
    result = reprice_profile(profiled / "profile.json", prompt_set(profiled / "new.jsonl"), log=lines.append)
    assert _digest(profiled / "profile.json") == before  # the original is never written
    return result, lines


@pytest.fixture(scope="module")
def scratch(profiled) -> Path:
    """`polyplan profile --prompts new.jsonl` from nothing, as a user would measure the new prompts."""
    out = profiled / "scratch.json"
    result = _invoke("profile", "--candidates", profiled / "models.yaml", "--prompts", profiled / "new.jsonl", "--out", out,
                     *PROFILE_FAST)
    assert result.exit_code == 0, result.output
    return out


def test_the_timings_are_the_original_profiles_bit_for_bit(profiled, repriced):
    result, _ = repriced
    original, new = read_profile(profiled / "profile.json"), read_profile(result.path)
    assert result.path == profiled / "profile.new.json" and result.path.is_file()
    assert [encode(model) for model in new.models] == [encode(model) for model in original.models]
    assert new.loop_overhead == original.loop_overhead and new.engine_overhead == original.engine_overhead
    assert new.switch_costs == original.switch_costs and new.switch_costs is not None
    assert (new.device, new.processor) == (original.device, original.processor)
    assert result.kept == ("latency curves", "loop overhead", "HF overhead", "switch costs")
    assert not any(label.startswith("latency") for label in result.measured)


def test_acceptance_is_what_a_profile_of_the_new_prompts_measures(profiled, repriced, scratch):
    result, _ = repriced
    original, new, fresh = read_profile(profiled / "profile.json"), read_profile(result.path), read_profile(scratch)
    pairs = [(pair.verifier, pair.drafter) for pair in fresh.pairs]
    assert pairs == [(pair.verifier, pair.drafter) for pair in new.pairs] and len(pairs) == 3
    for verifier, drafter in pairs:
        mine, theirs = new.stats(verifier, drafter, "greedy"), fresh.stats(verifier, drafter, "greedy")
        assert replace(mine, decoded=(), warnings=()) == replace(theirs, decoded=(), warnings=()), (verifier, drafter)
        assert mine.decoded == ()  # decoded runs are not re-measured
    assert new.acceptance_runs["greedy"] == fresh.acceptance_runs["greedy"]  # agreement strings, streams, fingerprint
    # and they are not the original's: the prompts changed what was measured
    assert new.stats("target", "ngram", "greedy").alpha != original.stats("target", "ngram", "greedy").alpha
    assert new.acceptance_runs["greedy"].pairs != original.acceptance_runs["greedy"].pairs
    assert any(original.stats(v, d, "greedy").decoded for v, d in pairs)  # the control: the original had decoded runs


def test_the_new_profile_says_which_prompts_and_where_its_timings_come_from(profiled, repriced):
    result, lines = repriced
    new = read_profile(result.path)
    assert new.profiler.prompt_file == str((profiled / "new.jsonl").resolve()) and new.profiler.prompts == 4
    assert new.profiler.candidates["path"] == str((profiled / "models.yaml").resolve())
    assert "4 prompts of new.jsonl" in new.notes and str((profiled / "profile.json").resolve()) in new.notes
    assert "kept unchanged" in new.notes and "decoded runs were not re-measured" in new.notes
    assert result.skipped == ("decoded runs",) and result.prompts == 4
    assert any(line.startswith("re-pricing ") and "decoded runs are not re-measured" in line for line in lines)


def test_a_rerun_measures_nothing(profiled, repriced):
    from polyplan.pipeline.reprice import reprice_profile
    from polyplan.profiler.prompt_sets import prompt_set

    first, _ = repriced
    assert first.measured and first.reused == ()  # the control: the first run measured every α and the agreement runs
    again = reprice_profile(profiled / "profile.json", prompt_set(profiled / "new.jsonl"), log=lambda line: None)
    assert again.measured == () and len(again.reused) == len(first.measured)
    before, after = read_profile(first.path), read_profile(again.path)
    assert after.pairs == before.pairs and after.acceptance_runs == before.acceptance_runs and after.models == before.models


def _moved_models(profiled: Path, tmp_path: Path, yaml_text: str) -> Path:
    """A copy of the profile whose record names a models.yaml in `tmp_path` holding `yaml_text`."""
    import yaml

    (tmp_path / "models.yaml").write_text(yaml_text)
    payload = json.loads((profiled / "profile.json").read_text())
    payload["profiler"]["candidates"] = {"path": str(tmp_path / "models.yaml"), "yaml": yaml.safe_load(yaml_text)}
    copy = tmp_path / "profile.json"
    copy.write_text(json.dumps(payload))
    return copy


def test_a_model_whose_files_changed_is_named(profiled, tmp_path):
    shutil.copytree(profiled / "target", tmp_path / "target")
    (tmp_path / "target" / "config.json").write_text((tmp_path / "target" / "config.json").read_text() + "\n")
    copy = _moved_models(profiled, tmp_path, "candidates:\n  - {name: target, source: ./target, target: true}\n"
                         f"  - {{name: small, source: {profiled / 'small'}}}\n  - {{name: ngram, derive: {{kind: ngram, max_n: 3}}}}\n")
    result = _invoke("recommend", "--profile", copy, "--prompts", profiled / "new.jsonl", "--out", tmp_path / "plan.json")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "model 'target' changed since" in result.output and str(tmp_path / "target") in result.output
    assert not (tmp_path / "profile.new.json").exists() and not (tmp_path / "plan.json").exists()


def test_a_model_whose_files_are_missing_is_named(profiled, tmp_path):
    copy = _moved_models(profiled, tmp_path, f"candidates:\n  - {{name: target, source: {profiled / 'target'}, target: true}}\n"
                         "  - {name: small, source: ./gone}\n  - {name: ngram, derive: {kind: ngram, max_n: 3}}\n")
    result = _invoke("recommend", "--profile", copy, "--prompts", profiled / "new.jsonl", "--out", tmp_path / "plan.json")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "not loadable here" in result.output and "'small'" in result.output and "./gone" in result.output


def test_a_model_the_profile_never_timed_is_refused(profiled, tmp_path):
    copy = _moved_models(profiled, tmp_path, f"candidates:\n  - {{name: target, source: {profiled / 'target'}, target: true}}\n"
                         f"  - {{name: small, source: {profiled / 'small'}}}\n  - {{name: ngram, derive: {{kind: ngram, max_n: 3}}}}\n"
                         "  - {name: ngram2, derive: {kind: ngram, max_n: 2}}\n")
    with pytest.raises(PolyplanError, match="'ngram2' .* has no latency curve"):
        from polyplan.pipeline.reprice import reprice_profile
        from polyplan.profiler.prompt_sets import prompt_set

        reprice_profile(copy, prompt_set(profiled / "new.jsonl"), log=lambda line: None)


def _empty(path: Path) -> Path:
    path.write_text("")
    return path


@pytest.mark.parametrize("setup, message", [
    (lambda root, tmp: ["--prompts", tmp / "missing.jsonl"], "no such prompt file"),
    (lambda root, tmp: ["--prompts", _empty(tmp / "empty.jsonl")], "no prompts (the file is empty)"),
    (lambda root, tmp: ["--prompts", root / "new.jsonl", "--threads", "2"], "re-priced only where it was timed"),
    (lambda root, tmp: ["--prompts", root / "new.jsonl", "--device", "cpu"], "--device: only used with --candidates"),
    (lambda root, tmp: ["--prompts", root / "new.jsonl", "--repriced-out", root / "profile.json"], "is the file given to --profile"),
    (lambda root, tmp: ["--repriced-out", tmp / "x.json"], "--repriced-out: only used with --profile and --prompts"),
])
def test_bad_input_is_one_line_and_exit_2(profiled, tmp_path, setup, message):
    before = _digest(profiled / "profile.json")
    result = _invoke("recommend", "--profile", profiled / "profile.json", *setup(profiled, tmp_path), "--out", tmp_path / "plan.json")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert message in result.output and result.output.count("error:") == 1
    assert _digest(profiled / "profile.json") == before and not (tmp_path / "plan.json").exists()


def test_recommend_reprices_then_plans_for_the_new_prompts(profiled, repriced, tmp_path):
    first, _ = repriced  # the re-priced profile exists: the command resumes it and measures nothing
    before = _digest(profiled / "profile.json")
    plan_path = tmp_path / "plan.json"
    result = _invoke("recommend", "--profile", profiled / "profile.json", "--prompts", profiled / "new.jsonl", "--out", plan_path)
    assert result.exit_code == 0, result.output
    assert f"re-priced profile {first.path}: 0 entries measured" in result.stdout
    assert "for 4 prompts of" in result.stdout and "kept from" in result.stdout
    assert "re-pricing " in result.stderr and "planning for the prompts of" in result.stderr
    plan = json.loads(plan_path.read_text())
    assert plan["profile"]["path"] == str(first.path)
    assert plan["profile"]["prompt_file"] == str((profiled / "new.jsonl").resolve()) and plan["profile"]["prompts"] == 4
    assert plan["profile"]["timings_from"] == str((profiled / "profile.json").resolve())
    assert _digest(profiled / "profile.json") == before
    # the chains are those `recommend --profile` ranks from the re-priced file (the self-check may reorder them)
    again = _invoke("recommend", "--profile", first.path, "--out", tmp_path / "numbers.json")
    assert again.exit_code == 0, again.output
    numbers = json.loads((tmp_path / "numbers.json").read_text())
    assert sorted(alt["chain"] for alt in numbers["alternatives"]) == sorted(alt["chain"] for alt in plan["alternatives"])
    assert "prompt_file" not in numbers["profile"]


def test_recommend_writes_the_repriced_profile_where_asked(profiled, tmp_path):
    out = tmp_path / "elsewhere.json"
    result = _invoke("recommend", "--profile", profiled / "profile.json", "--prompts", profiled / "new.jsonl", "--repriced-out", out,
                     "--out", tmp_path / "plan.json", "--no-check", "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)  # --json: the plan alone on stdout
    assert plan["profile"]["path"] == str(out) and read_profile(out).profiler.prompts == 4
    assert plan["self_check"]["skipped"]


def test_a_profile_that_does_not_record_its_models_is_refused_before_anything_loads(profiled, tmp_path):
    from polyplan.pipeline.reprice import reprice_profile
    from polyplan.profiler.prompt_sets import prompt_set

    payload = json.loads((profiled / "profile.json").read_text())
    del payload["profiler"]["candidates"]
    older = tmp_path / "older.json"
    older.write_text(json.dumps(payload))
    with pytest.raises(PolyplanError, match="does not record its models.yaml"):
        reprice_profile(older, prompt_set(profiled / "new.jsonl"), log=lambda line: None)
    assert not (tmp_path / "older.new.json").exists()
