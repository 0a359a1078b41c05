"""Valid but unusual input (issue 34: a default may never fail on valid input). Every
user-facing command, with its defaults, on the plans and profiles the README's flow produces at
its edges: a models.yaml of the target alone, a "don't speculate" plan, a plan with no
alternative beyond target-only, a profile timed at a single width, a profile measured only at
t1.0, drafters slower than the target, a profile of 3 prompts, a model whose context is shorter
than the default latency contexts, a target vocabulary smaller than the default drafter head.
Each exits 0 with no traceback, and where it did something else than asked it says so in one
line. The negative controls show that the same situations, chosen explicitly by the user,
still exit 2 with one `error:` line.

The profiles are written here from numbers (the fingerprints are the tiny family's own, so
validate, generate and the benches load the real tiny models); only `profile` and `drafter
distill` measure or train, at their smallest settings."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from conftest import write_candidate_workspace
from polyplan.cli.app import app
from polyplan.formats.candidates import read_candidates
from polyplan.formats.profile import (AgreementRuns, LatencyPoint, ModelProfile, PairAgreement, Profile, ProfilerRecord,
                                      SamplingStats, write_profile)
from polyplan.models.fingerprints import candidate_fingerprints

pytestmark = pytest.mark.usefixtures("single_thread", "short_calibrations")

DEVICE = "cpu test (1 thread)"  # the plans then run at one thread (`profiler.threads.plan_threads`)
TARGET_STEP = 0.004


def _run(*args) -> object:
    return CliRunner().invoke(app, [str(arg) for arg in args])


def _succeeds(result, note: str | None = None) -> None:
    """Exit 0, no traceback, and (when `note` is given) one `note:` line containing it."""
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and result.exception is None, result.output
    if note is not None:
        lines = [line for line in result.output.splitlines() if line.startswith("note:") and note in line]
        assert len(lines) == 1, result.output


def _fails(result, fragment: str) -> None:
    """Exit 2 and stderr is exactly one `error:` line containing `fragment`."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], result.stderr


@pytest.fixture(scope="module")
def family(tmp_path_factory) -> Path:
    """The tiny family (a 4-layer target of a 256-token context and a 64-token vocabulary, a
    1-layer drafter, prompt lookup) and a models.yaml of the target alone."""
    root = write_candidate_workspace(tmp_path_factory.mktemp("unusual"))
    (root / "one.yaml").write_text("candidates:\n  - {name: target, source: ./target, target: true}\n")
    return root


# --------------------------------------------------------------------------- the profiles


def _profile(root: Path, models_yaml: str, *, steps: dict[str, float], alphas: dict[str, float], modes=("greedy",),
             ks=(1, 2, 4, 8), contexts=(64,), prompts: int | None = None) -> Profile:
    """A profile of `models_yaml`'s models with their real fingerprints: T(k) = step x (1 + 0.1 (k - 1))
    at each context, every pair (verifier above drafter, in `alphas`' order) at acceptance `alphas[drafter]` in every mode,
    and, with `prompts`, greedy agreement runs (and the prompt count) of that many prompts."""
    path = root / models_yaml
    prints = candidate_fingerprints(read_candidates(path))
    models = tuple(ModelProfile(name, prints[name], tuple(LatencyPoint(context, k, step * (1 + 0.1 * (k - 1)))
                                                          for context in contexts for k in ks))
                   for name, step in {"target": TARGET_STEP, **steps}.items())
    profile = Profile(target="target", device=DEVICE, models=models, pairs=())
    names = ["target", *alphas]
    pairs = [(verifier, drafter) for index, verifier in enumerate(names) for drafter in names[index + 1:]]
    for verifier, drafter in pairs:
        for mode in modes:
            alpha = alphas[drafter]
            profile = profile.with_stats(verifier, drafter, mode, SamplingStats(alpha=alpha, engine_alpha=alpha))
    record = {"path": str(path), "yaml": yaml.safe_load(path.read_text()), "device": None}
    profile = dataclasses.replace(profile, profiler=ProfilerRecord(prompts=prompts, candidates=record))
    if prompts is not None:
        bits = tuple("1101110111" if index % 2 else "1110111011" for index in range(prompts))
        profile = dataclasses.replace(profile, acceptance_runs={"greedy": AgreementRuns(
            tuple(PairAgreement(verifier, drafter, bits) for verifier, drafter in pairs), prompts=prompts, new_tokens=10)})
    return profile


GOOD = dict(steps={"small": 0.001, "ngram": 0.0001}, alphas={"small": 0.8, "ngram": 0.5})
PROFILES = {
    # a models.yaml of the target alone: nothing to plan, the target alone is the plan
    "target-only": lambda root: _profile(root, "one.yaml", steps={}, alphas={}),
    # drafters that never pay: recommend's best answer is target-only
    "don't-speculate": lambda root: _profile(root, "models.yaml", steps={"small": 0.003, "ngram": 0.0001},
                                             alphas={"small": 0.02, "ngram": 0.01}),
    # one latency width at one context (and 8 prompts' agreement runs)
    "single-width": lambda root: _profile(root, "models.yaml", ks=(1,), prompts=8, **GOOD),
    # profiled with --temperatures 1 only: no greedy entry anywhere
    "sampled-only": lambda root: _profile(root, "models.yaml", modes=("t1.0",), **GOOD),
    # every drafter slower than the target
    "slow-drafters": lambda root: _profile(root, "models.yaml", steps={"small": 0.008, "ngram": 0.006},
                                           alphas={"small": 0.9, "ngram": 0.5}),
    # 3 prompts, agreement runs recorded: too few for the default split of `bench intervals`
    "three-prompts": lambda root: _profile(root, "models.yaml", prompts=3, **GOOD),
}


@pytest.fixture(scope="module")
def planned(family) -> dict[str, tuple[Path, Path]]:
    """(profile, plan) per case, the plan written by `recommend --profile` with its defaults
    (a case whose recommend fails has no plan file: its `recommend` test says why)."""
    made = {}
    for case, build in PROFILES.items():
        folder = family / case.replace("'", "")
        folder.mkdir()
        write_profile(build(family), folder / "profile.json")
        _run("recommend", "--profile", folder / "profile.json", "--out", folder / "plan.json")
        made[case] = (folder / "profile.json", folder / "plan.json")
    return made


def test_the_cases_are_what_they_claim(planned):
    """The fixture's plans: a target-only plan with no alternative, two "don't speculate" plans
    whose best is the target alone, a sampled plan made from the only mode measured."""
    missing = [case for case, (_, plan) in planned.items() if not plan.is_file()]
    assert not missing, f"recommend --profile failed on {missing}"
    plans = {case: json.loads(plan.read_text()) for case, (_, plan) in planned.items()}
    assert [entry["chain"] for entry in plans["target-only"]["alternatives"]] == [["target"]]
    for case in ("don't-speculate", "slow-drafters"):
        assert plans[case]["alternatives"][0]["chain"] == ["target"], case
    assert len(plans["don't-speculate"]["alternatives"]) > 1
    assert plans["sampled-only"]["sampling"] == "t1.0"
    assert len(plans["single-width"]["alternatives"][0]["chain"]) > 1


# --------------------------------------------------------------------------- commands x unusual inputs

VALIDATE_SMALL = ["--new-tokens", "4", "--repeats", "1", "--max-prompts", "1"]
PEERS_SMALL = ["--new-tokens", "4", "--repeats", "1", "--max-prompts", "1"]

# (command, case, the note it prints, or None); `{profile}`, `{plan}`, `{out}` are filled in
RUNS = [
    *[(("recommend", "--profile", "{profile}", "--out", "{out}/plan.json"), case,
       "has no greedy entries" if case == "sampled-only" else None) for case in PROFILES],
    *[(("theory", "report", "--profile", "{profile}"), case,
       {"target-only": "no drafter is faster", "slow-drafters": "no drafter is faster",
        "sampled-only": "has no greedy entries"}.get(case)) for case in PROFILES],
    *[(("validate", "--plan", "{plan}", *VALIDATE_SMALL, "--out", "{out}/report"), case,
       "validated all of them" if case == "target-only" else None)
      for case in ("target-only", "don't-speculate", "sampled-only")],
    *[(("generate", "--plan", "{plan}", "--max-new-tokens", "4", "w5 w6 w7"), case, None)
      for case in ("target-only", "don't-speculate", "single-width", "sampled-only")],
    *[(("export", "--plan", "{plan}", "--engine", engine), case, None)
      for engine in ("hf", "vllm") for case in ("target-only", "don't-speculate", "single-width", "sampled-only", "slow-drafters")],
    (("bench", "intervals", "--plan", "{plan}"), "target-only", "has no drafter"),
    (("bench", "intervals", "--plan", "{plan}"), "three-prompts", "too few to split"),
    (("bench", "intervals", "--plan", "{plan}", "--splits", "10"), "single-width", None),
    (("bench", "peers", "--plan", "{plan}", *PEERS_SMALL), "target-only", None),
]


def _fill(args, profile: Path, plan: Path, out: Path) -> list[str]:
    return [arg.format(profile=profile, plan=plan, out=out) for arg in args]


@pytest.mark.parametrize(("args", "case", "note"), RUNS, ids=[f"{' '.join(a[:2])}-{c}" for a, c, _ in RUNS])
def test_valid_but_unusual_input_succeeds(planned, tmp_path, args, case, note):
    profile, plan = planned[case]
    _succeeds(_run(*_fill(args, profile, plan, tmp_path)), note)


def test_an_export_of_a_plan_without_a_drafter_says_run_the_target_alone(planned):
    _, plan = planned["target-only"]
    result = _run("export", "--plan", plan, "--engine", "hf")
    _succeeds(result)
    assert "best: target alone: no drafter of the plan can run on hf (the profile has no drafter for 'target')" in result.stdout
    payload = json.loads(_run("export", "--plan", plan, "--engine", "vllm", "--json").stdout)
    assert payload["chosen"] is None and payload["config"] is None and payload["command"] is None
    assert payload["unexported"] == "the profile has no drafter for 'target'"


def test_the_theory_report_of_the_target_alone_keeps_what_needs_no_chain(planned):
    profile, _ = planned["target-only"]
    payload = json.loads(_run("theory", "report", "--profile", profile, "--json").stdout)
    assert payload["two_model"] is None and payload["three_model"] == [] and payload["insertions"] == {}
    assert [entry["chain"] for entry in payload["ranked"]] == [["target"]]
    assert len(payload["errata"]) == 2 and "no drafter is faster" in payload["note"]


def test_models_check_and_profile_of_the_target_alone_with_the_default_contexts(family, tmp_path):
    """The target's context is 256 tokens: the default latency contexts 128,384 are cut to what
    fits, and say so; a profile of the target alone plans the target alone."""
    _succeeds(_run("models", "check", "--candidates", family / "one.yaml"))
    profile = tmp_path / "profile.json"
    result = _run("profile", "--candidates", family / "one.yaml", "--prompts", family / "prompts.jsonl", "--out", profile,
                  "--latency-ks", "1,2", "--repeats", "1", "--warmup", "0", "--noise-budget", "0", "--new-tokens", "4",
                  "--temperatures", "0", "--threads", "1")
    _succeeds(result, "--context-lengths: the default 128,384 does not fit the 256-token context of 'target' (with k up to 2); "
                      "timing at 128")
    assert {point["context_length"] for point in json.loads(profile.read_text())["models"][0]["latency"]} == {128}
    planned = _run("recommend", "--profile", profile, "--out", tmp_path / "plan.json")
    _succeeds(planned)
    assert "best: don't speculate (target only); no chain could be planned" in planned.stdout


def test_drafter_distill_fits_its_default_head_to_a_small_vocabulary(family, tmp_path):
    """`--quick`'s head of 256 tokens on a 64-token target (and the full default, 8192, on the
    embedded family's 2048) covers the whole vocabulary instead of failing."""
    result = _run("drafter", "distill", "--quick", "--candidates", family / "one.yaml", "--out", tmp_path / "drafter")
    _succeeds(result, "--vocab: the default 256 is more than the target's 64 tokens; the head covers all 64")
    assert "head over 64 of 64 tokens" in result.stdout


# --------------------------------------------------------------------------- negative controls: chosen, not defaulted


@pytest.mark.parametrize(
    ("args", "case", "message"),
    [
        (("recommend", "--profile", "{profile}", "--sampling", "greedy", "--out", "{out}/plan.json"), "sampled-only",
         "no entry for verifier 'target', drafter 'small' under sampling 'greedy'"),
        (("theory", "report", "--profile", "{profile}", "--sampling", "greedy"), "sampled-only", "under sampling 'greedy'"),
        (("bench", "intervals", "--plan", "{plan}", "--split", "2"), "three-prompts", "the profile has 3 prompts, two sets of 2 need 4"),
        (("export", "--plan", "{plan}", "--engine", "llama.cpp"), "don't-speculate", "is not a GGUF file"),
    ],
)
def test_the_same_situation_chosen_explicitly_is_still_one_error_line(planned, tmp_path, args, case, message):
    profile, plan = planned[case]
    _fails(_run(*_fill(args, profile, plan, tmp_path)), message)


def test_an_explicit_vocab_above_the_targets_is_still_one_error_line(family, tmp_path):
    result = _run("drafter", "distill", "--candidates", family / "one.yaml", "--out", tmp_path / "drafter", "--vocab", "100")
    _fails(result, "--vocab: 100 is more than the target's 64 tokens")
    assert not (tmp_path / "drafter").exists()


def test_a_run_that_fails_after_fitting_a_default_prints_its_error_line_only(family, tmp_path):
    """The note on the fitted default waits until the run's checks pass."""
    result = _run("drafter", "distill", "--quick", "--candidates", family / "one.yaml", "--out", tmp_path / "d", "--exit-layers", "9")
    _fails(result, "--exit-layers: 9 is outside 1..3 (the target has 4 layers)")
    long = tmp_path / "long.txt"
    long.write_text(" ".join(["w9"] * 300) + "\n")
    result = _run("profile", "--candidates", family / "one.yaml", "--prompts", long, "--out", tmp_path / "p.json", "--threads", "1")
    _fails(result, "prompt of 300 tokens")


def test_explicit_context_lengths_that_do_not_fit_are_still_one_error_line(family, tmp_path):
    result = _run("profile", "--candidates", family / "one.yaml", "--prompts", family / "prompts.jsonl",
                  "--out", tmp_path / "p.json", "--context-lengths", "250", "--latency-ks", "1,8", "--threads", "1")
    _fails(result, "--context-lengths: 250 cached + 8 new tokens does not fit the context of 'target' (256 tokens)")
    assert not (tmp_path / "p.json").exists()
