"""`polyplan generate --plan` and `--chain NAME,...` on the shipped family (examples/zoo.yaml),
through the one model loader: a plan made here from a synthetic profile of those very models
(their real fingerprints), run with its chain, block sizes and sampling; greedy output equal to
target-only; the text streamed to stdout equal to the final text; and one line, exit 2, for
each input it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import save_model, synthetic_plan, tiny_llama, tiny_tokenizer
from polyplan.cli.app import app

pytestmark = pytest.mark.usefixtures("single_thread")

ZOO = Path(__file__).resolve().parents[1] / "examples" / "zoo.yaml"
PROMPT = "def add(a, b):"
TOKENS = "16"
TIMES = {"target": 0.01, "target-int8": 0.004, "ngram": 0.0002}
PAIRS = {("target", "target-int8"): 0.95, ("target", "ngram"): 0.3, ("target-int8", "ngram"): 0.3}


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def _plan(folder: Path, **options) -> Path:
    """A plan of the family from a synthetic profile with its models' real fingerprints."""
    return synthetic_plan(folder, ZOO, TIMES, PAIRS, **options)


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> Path:
    return _plan(tmp_path_factory.mktemp("plan"))


@pytest.fixture(scope="module")
def target_only() -> dict:
    result = run("generate", "--chain", "target", "--max-new-tokens", TOKENS, "--json", PROMPT)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_generate_plan_runs_the_planned_chain_and_block_sizes_losslessly(plan, target_only):
    planned = json.loads(plan.read_text())["alternatives"][0]  # the plan's own chain
    assert len(planned["chain"]) >= 2  # a real speculative chain, with a derived member in it
    assert set(planned["chain"][1:]) & {"target-int8", "ngram"}
    result = run("generate", "--plan", str(plan), "--max-new-tokens", TOKENS, "--json", PROMPT)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert [level["model"] for level in payload["levels"]] == planned["chain"]
    levels, blocks = payload["levels"], planned["block_sizes"]
    # the plan's K, not the default 4: the lowest verifier gets exactly K_{n-1} drafts per pass,
    # every level above at least its K_i
    assert levels[-2]["tokens_drafted"] == blocks[-1] * levels[-2]["verifications"] > 0
    assert all(level["tokens_drafted"] >= k * level["verifications"] for level, k in zip(levels, blocks))
    assert payload["token_ids"] == target_only["token_ids"]  # greedy: exactly the target's output
    assert payload["text"] == target_only["text"]


def test_generate_plan_runs_at_the_threads_its_profile_was_measured_with(tmp_path):
    """A plan profiled at 1 thread generates at 1 thread (its tokens/s are then comparable with
    its prediction); --threads overrides, and says so; 0 is one line."""
    plan = _plan(tmp_path, device="cpu test (1 thread)")
    result = run("generate", "--plan", str(plan), "--max-new-tokens", "4", PROMPT)
    assert result.exit_code == 0, result.output
    assert result.stdout.rstrip().splitlines()[-1].startswith("threads: 1 (as the plan's profile was measured")
    result = run("generate", "--plan", str(plan), "--max-new-tokens", "4", "--threads", "2", "--json", PROMPT)
    assert result.exit_code == 0 and json.loads(result.stdout)["threads"] == 2
    _fails(run("generate", "--plan", str(plan), "--threads", "0", PROMPT), "--threads: must be >= 1")


@pytest.mark.parametrize("recorded, here, lines", [
    (None, "xeon", 0),  # a plan from before processors were recorded: nothing to compare
    ("epyc", "epyc", 0),  # the same processor (negative control)
    ("epyc", "xeon", 1),
])
def test_generate_plan_says_once_when_the_plan_was_profiled_on_another_processor(plan, tmp_path, monkeypatch, recorded, here, lines):
    from polyplan.formats.codec import encode
    from polyplan.formats.processor import Processor

    fakes = {"epyc": Processor("AMD EPYC 9R14", "x86_64", ("avx2", "avx512f"), "x86"),
             "xeon": Processor("Intel(R) Xeon(R) Processor", "x86_64", ("amx_tile", "avx2", "avx512f"), "x86")}
    payload = json.loads(plan.read_text())
    payload["processor"] = None if recorded is None else encode(fakes[recorded])
    (tmp_path / "plan.json").write_text(json.dumps(payload))
    monkeypatch.setattr("polyplan.profiler.processor.this_processor", lambda device="cpu": fakes[here])
    result = run("generate", "--plan", str(tmp_path / "plan.json"), "--max-new-tokens", "2", PROMPT)
    assert result.exit_code == 0, result.output  # it warns and generates
    said = [line for line in result.output.splitlines() if "profiled on" in line]
    assert len(said) == lines and all(line.startswith("warning: the plan was profiled on 'AMD EPYC 9R14 (avx512, x86)' but "
                                                      "this is 'Intel(R) Xeon(R) Processor (amx, x86)'") for line in said)


def test_generate_plan_streams_the_final_text_then_the_table(plan, target_only):
    result = run("generate", "--plan", str(plan), "--max-new-tokens", TOKENS, PROMPT)
    assert result.exit_code == 0, result.output
    text, table = result.stdout.split("\n\nlevel", 1)
    assert text == target_only["text"]
    assert "mean tokens per target pass" in table


def test_chain_names_derived_members_and_folders_from_models_yaml(target_only):
    from polyplan.models.builtin import builtin_folder

    named = run("generate", "--chain", "target,target-int8,ngram", "--block-sizes", "3,2", "--max-new-tokens", TOKENS, "--json", PROMPT)
    assert named.exit_code == 0, named.output
    payload = json.loads(named.stdout)
    assert [level["model"] for level in payload["levels"]] == ["target", "target-int8", "ngram"]
    assert payload["token_ids"] == target_only["token_ids"]
    folder = str(builtin_folder("target"))
    mixed = run("generate", "--chain", f"{folder},target-exit2", "--candidates", str(ZOO), "--max-new-tokens", TOKENS, "--json", PROMPT)
    assert mixed.exit_code == 0, mixed.output
    payload = json.loads(mixed.stdout)
    assert [level["model"] for level in payload["levels"]] == ["target#2", "target-exit2"]  # the folder's name is the file's target's
    assert payload["token_ids"] == target_only["token_ids"]


def test_a_sampled_plan_samples_at_its_temperature_seeded(tmp_path, target_only):
    plan = _plan(tmp_path, sampling="t0.8")
    assert json.loads(plan.read_text())["sampling"] == "t0.8"
    args = ["generate", "--plan", str(plan), "--max-new-tokens", TOKENS, "--top-k", "20", "--json", PROMPT]
    first, second, other = run(*args, "--seed", "3"), run(*args, "--seed", "3"), run(*args, "--seed", "4")
    assert first.exit_code == 0, first.output  # --top-k is taken: the plan samples (greedy would refuse it)
    tokens = [json.loads(result.stdout)["token_ids"] for result in (first, second, other)]
    assert tokens[0] == tokens[1]  # seeded
    assert any(sampled != target_only["token_ids"] for sampled in (tokens[0], tokens[2]))  # sampled, not greedy
    greedy = run("generate", "--chain", "target", "--top-k", "20", PROMPT)
    _fails(greedy, "--top-k: only used with --temperature > 0")


def _fails(result, *needles: str) -> str:
    assert result.exit_code == 2, result.output
    line = result.output
    assert line.startswith("error: ") and line.count("\n") == 1 and "Traceback" not in line
    for needle in needles:
        assert needle in line
    return line


def test_a_drafter_with_another_vocabulary_is_refused_in_one_line_naming_it(tmp_path):
    odd = save_model(tmp_path / "odd", tiny_llama(0, layers=1), tiny_tokenizer())
    _fails(run("generate", "--chain", f"target,{odd}", PROMPT), "chain member 1 ('odd'): ", "differs from the target 'target'")


def test_plan_errors_are_one_line(plan, tmp_path):
    _fails(run("generate", "--plan", str(plan), "--chain", "target", PROMPT), "--plan, --chain: give one")
    _fails(run("generate", PROMPT), "--plan, --chain: give one")
    _fails(run("generate", "--plan", str(plan), "--block-sizes", "2", PROMPT), "--block-sizes: the plan sets it")
    _fails(run("generate", "--plan", str(plan), "--temperature", "0.5", PROMPT), "--temperature: the plan sets it")
    unrecorded = _plan(tmp_path, recorded=False)
    _fails(run("generate", "--plan", str(unrecorded), PROMPT), "candidates: the plan does not record its models.yaml")
    _fails(run("generate", "--plan", str(plan), "--candidates", str(tmp_path / "gone.yaml"), PROMPT), "gone.yaml", "not found")
    changed = tmp_path / "changed.yaml"
    changed.write_text(ZOO.read_text().replace("max_n: 4", "max_n: 3"))
    _fails(run("generate", "--plan", str(plan), "--candidates", str(changed), PROMPT), "model 'ngram' changed since the plan was made")
    _fails(run("generate", "--chain", "target,nope", PROMPT), "--chain: 'nope' is neither a candidate of", "(target, target-int8")
    _fails(run("generate", "--chain", "ngram", PROMPT), "an n-gram drafter cannot be the target")


@pytest.mark.parametrize("policy", [{"k_min": 1, "k_max": 15}, {"p_min": 0.5}], ids=str)
def test_generate_plan_runs_the_plans_draft_policy_losslessly(plan, target_only, tmp_path, policy):
    """A plan whose last level drafts under a policy (`formats.plan.DraftPolicy`): generate runs
    it, and the drafts per verification of that level are no longer exactly its K."""
    payload = json.loads(plan.read_text())
    payload["alternatives"][0]["draft_policy"] = policy
    edited = tmp_path / "plan.json"
    edited.write_text(json.dumps(payload))
    result = run("generate", "--plan", str(edited), "--max-new-tokens", TOKENS, "--json", PROMPT)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["token_ids"] == target_only["token_ids"]
    last, k = out["levels"][-2], payload["alternatives"][0]["block_sizes"][-1]
    assert last["tokens_drafted"] != k * last["verifications"] or "p_min" in policy
    refused = run("generate", "--plan", str(edited), "--p-min", "0.5", PROMPT)
    assert refused.exit_code == 2 and "error: --p-min: the plan sets it" in refused.output
