"""Hostile and careless input: every case ends in one `error:` line (exit 2) before any work,
and no file a user made is lost (issue 15). No model is loaded in this module."""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyplan.cli.app import app
from conftest import shipped_paper_profile
from polyplan.formats.errors import PolyplanError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PAPER = shipped_paper_profile()


def _run(*args: str):
    return CliRunner().invoke(app, [str(arg) for arg in args])


def _fails(result, fragment: str) -> None:
    """Exit 2, and stderr is exactly one `error:` line containing `fragment`."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert fragment in lines[0], lines[0]


@pytest.fixture()
def profile(tmp_path) -> Path:
    path = tmp_path / "p.json"
    shutil.copy(PAPER, path)
    return path


@pytest.fixture()
def plan(tmp_path, profile) -> Path:
    path = tmp_path / "plan.json"
    result = _run("recommend", "--profile", profile, "--out", path)
    assert result.exit_code == 0, result.output
    return path


# --------------------------------------------------------------------------- clashing paths


def test_recommend_refuses_to_write_the_plan_over_its_own_profile(profile, tmp_path):
    before = profile.read_bytes()
    _fails(_run("recommend", "--profile", profile, "--out", profile), "is the file given to --profile")
    link = tmp_path / "link.json"
    link.symlink_to(profile)
    _fails(_run("recommend", "--profile", link, "--out", profile), "is the file given to --profile")
    _fails(_run("recommend", "--profile", profile, "--out", tmp_path / "." / ".." / tmp_path.name / "p.json"), "--profile")
    assert profile.read_bytes() == before


@pytest.mark.parametrize(
    "out, message",
    [
        ("", "give a file path"),
        ("/proc/x", "cannot write /proc/x"),
        ("{tmp}", "is a folder"),
        ("{tmp}/missing/plan.json", "does not exist"),
    ],
)
def test_recommend_checks_its_output_path_first(profile, tmp_path, out, message):
    _fails(_run("recommend", "--profile", profile, "--out", out.format(tmp=tmp_path)), message)


def test_validate_refuses_an_out_folder_that_would_overwrite_its_plan(plan, tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    inside = folder / "report.json"
    shutil.copy(plan, inside)
    before = inside.read_bytes()
    _fails(_run("validate", "--plan", inside, "--out", folder), "the file given to --plan")
    assert inside.read_bytes() == before


@pytest.mark.parametrize("command", ["validate", "demo"])
def test_reports_never_overwrite_an_unrelated_file(plan, tmp_path, command):
    other = tmp_path / "notes.txt"
    other.write_text("mine\n")
    args = ["--plan", plan] if command == "validate" else ["--quick"]
    _fails(_run(command, *args, "--out", other), "exists and is not a folder")
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "report.json").write_text('{"mine": true}\n')
    _fails(_run(command, *args, "--out", folder), "is not a polyplan report.json")
    (folder / "report.json").unlink()
    (folder / "report.md").write_text("my notes\n")
    _fails(_run(command, *args, "--out", folder), "no polyplan report.json is beside it")
    assert other.read_text() == "mine\n" and (folder / "report.md").read_text() == "my notes\n"


def test_demo_refuses_a_foreign_plan_json_in_its_folder(tmp_path):
    folder = tmp_path / "demo"
    folder.mkdir()
    (folder / "plan.json").write_text("[1, 2]\n")
    _fails(_run("demo", "--quick", "--out", folder), "is not a polyplan plan.json")


@pytest.mark.parametrize("out", ["/proc/x"])
def test_validate_checks_its_out_folder_before_reading_models(plan, out):
    _fails(_run("validate", "--plan", plan, "--out", out), "cannot create the folder /proc/x")


# --------------------------------------------------------------------------- plan consistency


def _edited(plan: Path, tmp_path: Path, edit) -> Path:
    payload = json.loads(plan.read_text())
    edit(payload)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(payload))
    return path


def _set_speedup(payload):  # the one place the plan's predicted speedup is spelled
    payload["alternatives"][0]["exact"]["speedup"] = 9.0


def _set_alternative_blocks(payload):
    payload["alternatives"][0]["block_sizes"] = [3, 3]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p["alternatives"][0]["paper"].__setitem__("speedup", 0), "alternatives[0].paper.speedup: must be > 0"),
        (_set_speedup, "records 9x, but its profile"),
        (_set_alternative_blocks, "the plan was edited"),
        (lambda p: p.__setitem__("loop_overhead", {"per_step_s": -1, "per_round_s": 0}), "loop_overhead"),
        (lambda p: p.__setitem__("loop_overhead", [1]), "loop_overhead"),
        (lambda p: p.__setitem__("switch_costs", {"eagle": [-1.0]}), "switch_costs.eagle"),
        (lambda p: p.__setitem__("switch_costs", [0.1]), "switch_costs: must be a JSON object"),
    ],
)
def test_a_hand_edited_plan_is_refused_before_any_work(plan, tmp_path, edit, message):
    edited = _edited(plan, tmp_path, edit)
    _fails(_run("validate", "--plan", edited, "--out", tmp_path / "r"), message)
    assert not (tmp_path / "r").exists()


def test_a_plan_whose_profile_was_measured_again_is_not_called_edited(plan, profile, tmp_path):
    from polyplan.planner.plan_check import check_plan
    from polyplan.formats.plan import read_plan
    from polyplan.formats.profile import read_profile

    planned = read_plan(plan)
    assert check_plan(planned, "plan.json", read_profile(profile))  # consistent with its own profile
    changed = read_profile(profile)
    first = changed.models[0]
    changed = changed.with_model(replace(first, latency=(replace(first.latency[0], median_s=first.latency[0].median_s * 2),
                                                         *first.latency[1:])))
    assert check_plan(planned, "plan.json", changed)  # another profile: not compared, not refused
    hand_edited = read_plan(_edited(plan, tmp_path, _set_speedup))
    with pytest.raises(PolyplanError, match="the plan was edited"):
        check_plan(hand_edited, "plan.json", read_profile(profile))


# --------------------------------------------------------------------------- readers


def _mutated_profile(tmp_path, edit) -> Path:
    payload = json.loads(PAPER.read_text())
    edit(payload)
    path = tmp_path / "mutated.json"
    path.write_text(json.dumps(payload))
    return path


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p.setdefault("meta", {}).__setitem__("switch_cost", [1, 2]), "meta.switch_cost: must be a JSON object"),
        (lambda p: p.setdefault("meta", {}).__setitem__("switch_cost", "x"), "meta.switch_cost: must be a JSON object"),
        (lambda p: p.setdefault("meta", {}).__setitem__("acceptance_runs", [1]), "meta.acceptance_runs: must be a JSON object"),
        (lambda p: p.setdefault("meta", {}).__setitem__("loop_overhead", [1]), "meta.loop_overhead: must be a JSON object"),
        (lambda p: [pt.__setitem__("median_s", 1e307) for m in p["models"] for pt in m["latency"]], "must be at most 1e+06 s"),
    ],
)
def test_wrong_types_and_absurd_numbers_in_a_profile_are_one_line(tmp_path, edit, message):
    _fails(_run("recommend", "--profile", _mutated_profile(tmp_path, edit), "--out", tmp_path / "plan.json"), message)


@pytest.mark.parametrize("kind", ["profile", "plan", "models.yaml", "prompts"])
def test_non_utf8_files_are_one_line(tmp_path, plan, kind):
    bad = tmp_path / ("bad.yaml" if kind == "models.yaml" else "bad.jsonl" if kind == "prompts" else "bad.json")
    bad.write_bytes(b'{"a": "\xff\xfe"}\n')
    args = {
        "profile": ["recommend", "--profile", bad, "--out", tmp_path / "o.json"],
        "plan": ["validate", "--plan", bad, "--out", tmp_path / "r"],
        "models.yaml": ["models", "check", "--candidates", bad],
        "prompts": ["validate", "--plan", plan, "--prompts", bad, "--candidates", bad, "--out", tmp_path / "r"],
    }[kind]
    result = _run(*args)
    _fails(result, "bad.")
    assert "UTF-8" in result.stderr or "utf-8" in result.stderr


def test_deep_nesting_is_one_line(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    _fails(_run("recommend", "--profile", deep, "--out", tmp_path / "o.json"), "nested too deeply")
    yaml_deep = tmp_path / "deep.yaml"
    yaml_deep.write_text("candidates: " + "[" * 5000 + "]" * 5000 + "\n")
    _fails(_run("models", "check", "--candidates", yaml_deep), "nested too deeply")


def test_a_duplicate_yaml_key_is_an_error_not_last_one_wins(tmp_path):
    from polyplan.formats.candidates import read_candidates

    path = tmp_path / "models.yaml"
    path.write_text("candidates:\n  - name: a\n    name: b\n    source: builtin:target\n    target: true\n")
    with pytest.raises(PolyplanError, match=r"line 3: duplicate key 'name'"):
        read_candidates(path)


# --------------------------------------------------------------------------- numbers and options


@pytest.mark.parametrize(
    "args, message",
    [
        (["generate", "hi", "--chain", ".", "--top-k", "5"], "--top-k: only used with --temperature > 0"),
        (["generate", "hi", "--chain", ".", "--top-p", "0.9"], "--top-p: only used with --temperature > 0"),
        (["profile", "--no-decoded", "--decoded-prompts", "2"], "--decoded-prompts: only used with --decoded"),
        (["validate", "--plan", "p.json", "--prompts", "x.jsonl", "--prompts-per-kind", "2"], "--prompts-per-kind: only used with"),
    ],
)
def test_options_a_command_would_ignore_are_errors(args, message):
    _fails(_run(*args), message)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--k-max", "100000"], "--k-max: must be in 1..128"),
        (["--k-max", "0"], "k_max, a block size: must be an integer >= 1"),
        (["--search", "optuna", "--seed", "-1"], "--seed: must be in 0..4294967295"),
        (["--seed", str(2**40)], "--seed"),
        (["--max-levels", "0"], "--max-levels: must be >= 1"),
        (["--prompts", "x.jsonl"], "x.jsonl: no such prompt file"),  # --profile with --prompts re-prices the profile
        (["--raw-prompts"], "--raw-prompts: only used with --candidates"),
        (["--threads", "2"], "--threads: only used with --candidates"),
        (["--device", "cpu"], "--device: only used with --candidates"),
        (["--cache-dir", "c"], "--cache-dir: only used with --candidates"),
        (["--budget", "5m"], "--budget: only used with --candidates"),
    ],
)
def test_recommend_options_are_checked_and_none_is_silently_ignored(profile, tmp_path, args, message):
    _fails(_run("recommend", "--profile", profile, "--out", tmp_path / "o.json", *args), message)


@pytest.mark.parametrize(
    "args, message",
    [
        (["theory", "capped-geometric", "--alpha", "0.5", "--k", str(10**400)], "integer of 401 digits"),
        (["theory", "capped-geometric", "--alpha", "0.5", "--k", "1000001"], "in 1..1000000, got 1000001"),
        (["bench", "decoder", "--threads", "0"], "--threads: must be >= 1"),
        (["bench", "decoder", "--device", "tpu9"], "'tpu9' is not a torch device"),
        (["bench", "decoder", "--block-size", "100000"], "--block-size"),
        (["generate", "hi", "--chain", ".", "--device", "tpu9"], "'tpu9' is not a torch device"),
        (["generate", "hi", "--chain", ".", "--block-sizes", "100000"], "--block-sizes"),
        (["generate", "hi", "--chain", ".", "--seed", "-1"], "--seed"),
        (["demo", "--max-levels", "0"], "--max-levels: must be >= 1"),
        (["demo", "--threads", "0"], "--threads: must be >= 1"),
        (["profile", "--max-prompts", "0"], "--max-prompts: must be >= 1"),
        (["profile", "--latency-ks", "1,100000"], "--latency-ks"),
        (["profile", "--seed", "-1"], "--seed"),
        (["profile", "--out", "/proc/x.json"], "cannot write /proc/x.json"),
        (["validate", "--plan", "p.json", "--threads", "0"], "--threads: must be >= 1"),
    ],
)
def test_numeric_ranges_are_one_line(args, message):
    _fails(_run(*args), message)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a torch without CUDA")
def test_a_cuda_device_on_a_cpu_only_torch_is_one_line(tmp_path):
    from polyplan.formats.candidates import parse_candidates
    from polyplan.models.loader import load_candidates

    _fails(_run("generate", "hi", "--chain", ".", "--device", "cuda"), "'cuda' is unavailable")
    yaml = {"candidates": [{"name": "t", "source": "builtin:target", "target": True, "device": "cuda"}]}
    with pytest.raises(PolyplanError, match=r"candidate 't': device: 'cuda' is unavailable"):
        load_candidates(parse_candidates(yaml, base_dir=tmp_path))


def test_alpha_1e_100_is_a_valid_acceptance():
    result = _run("theory", "capped-geometric", "--alpha", "1e-100", "--k", "2", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["acceptance"] == 1e-100


# --------------------------------------------------------------------------- writes


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_outputs_honour_the_umask(tmp_path, umask, mode):
    from polyplan.formats.atomic import write_text_atomically

    previous = os.umask(umask)
    try:
        write_text_atomically(tmp_path / "new.json", "{}\n")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == mode


def test_an_existing_output_keeps_its_mode(tmp_path):
    from polyplan.formats.atomic import write_text_atomically

    path = tmp_path / "kept.json"
    path.write_text("old\n")
    path.chmod(0o640)
    write_text_atomically(path, "new\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640 and path.read_text() == "new\n"


def test_a_full_disk_is_one_line_and_keeps_the_old_file(tmp_path, profile, monkeypatch):
    import errno

    out = tmp_path / "plan.json"
    out.write_text("previous plan\n")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    _fails(_run("recommend", "--profile", profile, "--out", out), "No space left on device")
    assert out.read_text() == "previous plan\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json", "plan.json"]  # no temporary left


def test_report_folder_names_match_what_the_report_writes():
    from polyplan.validation import report_folder
    from polyplan.validation.plots import PLOT_FILES
    from polyplan.validation.reporting import JSON_FILE, REPORT_FILE

    assert (report_folder.REPORT_JSON, report_folder.REPORT_MD) == (JSON_FILE, REPORT_FILE)
    assert report_folder.PLOTS == tuple(PLOT_FILES.values())


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda folder: (folder / "model.safetensors").write_bytes(b"not a safetensors file"), "cannot load a causal language model"),
        (lambda folder: (folder / "config.json").write_text("{ not json"), "chain member 0"),
        (lambda folder: (folder / "config.json").write_text('{"model_type": "llama", "hidden_size": "x"}'), "chain member 0"),
    ],
)
def test_broken_model_files_reached_through_generate_are_one_line(tmp_path, damage, message):
    from conftest import save_model, tiny_llama, tiny_tokenizer

    folder = save_model(tmp_path / "model", tiny_llama(0, layers=1, hidden=16), tiny_tokenizer())
    damage(folder)
    _fails(_run("generate", "w5 w6", "--chain", folder, "--max-new-tokens", "2"), message)


def test_a_plan_from_a_profile_of_too_few_prompts_is_flagged(tmp_path):
    payload = json.loads(PAPER.read_text())
    payload.setdefault("meta", {})["profiler"] = {"prompts": 1}
    few = tmp_path / "few.json"
    few.write_text(json.dumps(payload))
    result = _run("recommend", "--profile", few, "--out", tmp_path / "plan.json")
    assert result.exit_code == 0, result.output
    assert "warning: the profile was measured on 1 prompt(s), too few for confidence intervals (needs >= 5)" in result.stderr
    enough = _run("recommend", "--profile", PAPER, "--out", tmp_path / "plan2.json")
    assert enough.exit_code == 0 and "warning" not in enough.stderr


def test_too_few_prompts_have_too_few_distinct_resamples_for_a_95_percent_interval():
    """The rule's arithmetic: C(2n-1, n) distinct bootstrap resamples; a 95% percentile
    interval needs >= 40 (2.5% in each tail) -- first reached at n = 5."""
    from polyplan.planner.intervals.sample_size import MIN_PROMPTS, distinct_resamples, enough_for_interval

    assert [distinct_resamples(n) for n in range(1, 6)] == [1, 3, 10, 35, 126]
    assert MIN_PROMPTS == min(n for n in range(1, 20) if distinct_resamples(n) >= 40)
    assert not enough_for_interval(1) and not enough_for_interval(4) and enough_for_interval(5) and enough_for_interval(None)


def test_an_error_naming_a_value_with_control_characters_stays_one_line(tmp_path):
    """Found by the fuzz test at 400 examples: a source '0\\r' split the error in two lines."""
    from typer.testing import CliRunner

    from polyplan.cli.app import app

    models = tmp_path / "models.yaml"
    models.write_text('candidates:\n  - {name: target, source: "0\\r\\nx", target: true}\n', encoding="utf-8")
    result = CliRunner().invoke(app, ["models", "check", "--candidates", str(models)])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "0\\r\\nx" in lines[0]


def test_validate_refuses_zero_prompts_per_kind_up_front(plan, tmp_path):
    """A merge once turned `--prompts-per-kind 0` into the default 4 (`0 or 4`)."""
    _fails(_run("validate", "--plan", plan, "--prompts-per-kind", "0", "--out", tmp_path / "r"),
           "--prompts-per-kind: must be >= 1")


def test_an_integer_longer_than_pythons_digit_limit_is_one_line(tmp_path):
    """`json.loads` raises a plain ValueError past 4300 digits, not a JSONDecodeError."""
    bad = tmp_path / "p.json"
    bad.write_text('{"schema_version": ' + "9" * 5000 + "}\n", encoding="utf-8")
    _fails(_run("recommend", "--profile", bad), "not valid JSON")


@pytest.mark.parametrize(
    "budget, message",
    [
        ("0", "--budget: must be more than 0 seconds"),
        ("5d", "--budget: unknown unit 'd' in '5d' (use s, m or h"),
        ("5", "--budget: give a unit, e.g. 5m or 5s"),
        ("soon", "--budget: cannot read 'soon' as a duration"),
    ],
)
@pytest.mark.parametrize("command", ["recommend", "profile"])
def test_a_budget_polyplan_cannot_read_is_one_line_before_any_model_loads(tmp_path, command, budget, message):
    out = ["--out", tmp_path / ("plan.json" if command == "recommend" else "profile.json")]
    candidates = Path(__file__).resolve().parents[1] / "examples" / "zoo.yaml"
    _fails(_run(command, "--candidates", candidates, "--budget", budget, *out), message)
