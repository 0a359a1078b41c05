"""`polyplan generate` and `polyplan bench decoder` on folders written by `save_pretrained`."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from conftest import perturbed_copy, save_model, tiny_llama, tiny_tokenizer
from polyplan.cli.app import app

pytestmark = pytest.mark.usefixtures("single_thread")

PROMPT = "w5 w17 w33 w8"


@pytest.fixture(scope="module")
def folders(tmp_path_factory, single_thread):
    root = tmp_path_factory.mktemp("chain")
    tokenizer = tiny_tokenizer()
    target = tiny_llama(0, layers=3, init=0.1)
    return {
        "target": save_model(root / "target", target, tokenizer),
        "draft": save_model(root / "draft", perturbed_copy(target, 0.03, seed=1), tokenizer),
        "small": save_model(root / "small", tiny_llama(4, layers=1, init=0.1), tokenizer),
        "swapped": save_model(root / "swapped", target, tiny_tokenizer(swap=(5, 6))),
        "model": target,
    }


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def greedy_reference(model, prompt_ids, count):
    sequence = list(prompt_ids)
    with torch.no_grad():
        for _ in range(count):
            token = int(model(torch.tensor([sequence])).logits[0, -1].argmax())
            sequence.append(token)
            if token == 2:  # the tokenizer's </s>
                break
    return sequence[len(prompt_ids) :]


def test_generate_prints_text_and_a_statistics_table(folders):
    chain = f"{folders['target']},{folders['draft']},{folders['small']}"
    result = run("generate", "--chain", chain, "--block-sizes", "3,2", "--max-new-tokens", "10", PROMPT)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() and all(word.startswith("w") for word in lines[0].split())
    header = next(line for line in lines if line.strip().startswith("level"))
    assert "forwards" in header and "tokens/verif." in header
    rows = [line.split() for line in lines if line.strip()[:1].isdigit() and "new tokens" not in line]
    assert [row[:2] for row in rows] == [["1", "target"], ["2", "draft"], ["3", "small"]]
    assert any("new tokens in" in line for line in lines)


def test_generate_json_matches_greedy_target(folders):
    tokenizer = tiny_tokenizer()
    prompt_ids = tokenizer(PROMPT)["input_ids"]
    expected = greedy_reference(folders["model"], prompt_ids, 12)
    chain = f"{folders['target']},{folders['draft']}"
    result = run("generate", "--chain", chain, "--max-new-tokens", "12", "--json", PROMPT)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert set(payload) >= {"text", "token_ids", "levels", "wall_time_s"}
    assert payload["token_ids"] == expected
    assert payload["text"] == tokenizer.decode(expected, skip_special_tokens=True)
    assert [level["model"] for level in payload["levels"]] == ["target", "draft"]
    top, draft = payload["levels"]
    assert top["forward_passes"] == len(top["tokens_per_verification"]) >= 1
    assert all(1 <= count <= 5 for count in top["tokens_per_verification"])  # default K = 4
    assert draft["tokens_per_verification"] == [] and draft["forward_passes"] >= 4
    assert payload["wall_time_s"] > 0
    # the readable acceptance metrics agree with the raw counts
    assert "tokens_proposed" not in top and top["tokens_drafted"] >= top["tokens_accepted"]  # one name for the count
    assert top["acceptance_rate"] == pytest.approx(top["tokens_accepted"] / top["tokens_drafted"])
    assert top["verifications"] == len(top["tokens_per_verification"])
    assert top["mean_tokens_per_verification"] == pytest.approx(sum(top["tokens_per_verification"]) / top["verifications"])
    assert payload["tokens_per_target_pass"] == pytest.approx(len(expected) / top["forward_passes"])
    assert draft["acceptance_rate"] is None  # nothing verified at the last level (NaN becomes null)


def test_generate_sampling_is_seeded(folders):
    chain = f"{folders['target']},{folders['draft']}"
    args = ["generate", "--chain", chain, "--temperature", "0.9", "--top-k", "20", "--top-p", "0.95", "--max-new-tokens", "8", "--json"]
    first = json.loads(run(*args, "--seed", "3", PROMPT).stdout)
    second = json.loads(run(*args, "--seed", "3", PROMPT).stdout)
    assert first["token_ids"] == second["token_ids"] and len(first["token_ids"]) <= 8


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--block-sizes", "2,2"], "error: block_sizes: a chain of 2 members needs 1 block size"),
        (["--block-sizes", "two"], "error: --block-sizes: expected comma-separated integers"),
        (["--block-sizes", "0"], "error: block_sizes[0]: 0 must be an integer >= 1"),
        (["--temperature", "-1"], "error: temperature: -1.0 must be"),
        (["--top-p", "1.5"], "error: top_p: 1.5 must lie in (0, 1]"),
        (["--max-new-tokens", "1000"], "error: max_new_tokens: prompt (4) + 1000 new tokens"),
        (["--draft-cap", "8..2"], "error: draft policy: k_min 8 is above k_max 2"),
        (["--draft-cap", "2-8"], "error: --draft-cap: expected MIN..MAX (two integers), got '2-8'"),
        (["--draft-cap", "5..8"], "error: draft policy: the last block size (block_sizes[0]) 4 must lie in [k_min, k_max] = [5, 8]"),
        (["--p-min", "1.5"], "error: draft policy: p_min must be a number in (0, 1), got 1.5"),
        (["--p-min", "0"], "error: draft policy: p_min must be a number in (0, 1), got 0.0"),
    ],
)
def test_generate_bad_options_fail_cleanly(folders, extra, message):
    result = run("generate", "--chain", f"{folders['target']},{folders['draft']}", *extra, PROMPT)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_generate_bad_chains_fail_cleanly(folders, tmp_path):
    missing = run("generate", "--chain", f"{folders['target']},{tmp_path / 'nowhere'}", PROMPT)
    assert missing.exit_code == 2 and "error: chain member 1" in missing.output and "no such model folder" in missing.output
    swapped = run("generate", "--chain", f"{folders['target']},{folders['swapped']}", PROMPT)
    assert swapped.exit_code == 2 and "error: chain member 1 ('swapped'): tokenizer differs from the target 'target'" in swapped.output
    empty = run("generate", "--chain", ",", PROMPT)
    assert empty.exit_code == 2 and "error: chain: empty" in empty.output


def test_bench_decoder_runs_both_races_on_folders(folders):
    result = run(
        "bench", "decoder", "--target", str(folders["target"]), "--draft", str(folders["draft"]),
        "--prompts", "2", "--max-new-tokens", "6", "--repeats", "1", "--block-size", "3", "--json",
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert [race["race"] for race in payload["races"]] == ["n=1 vs generate()", "n=2 vs generate(assistant_model), K=3"]
    for race in payload["races"]:
        assert race["tokens_equal"] is True  # our greedy tokens equal Hugging Face's, plain and assisted
        assert race["ratio"] > 0
    text = run(
        "bench", "decoder", "--target", str(folders["target"]), "--draft", str(folders["draft"]),
        "--prompts", "1", "--max-new-tokens", "4", "--repeats", "1",
    )
    assert text.exit_code == 0 and "ratio HF/ours" in text.output


def test_bench_decoder_needs_both_folders(folders):
    result = run("bench", "decoder", "--target", str(folders["target"]))
    assert result.exit_code == 2 and "error: --target/--draft: give both" in result.output


def test_bench_decoder_runs_a_prompt_file(folders, tmp_path):
    prompts = tmp_path / "question.jsonl"
    prompts.write_text("\n".join(json.dumps({"category": c, "turns": [t]}) for c, t in (("qa", "w4 w9 w12"), ("math", "w7 w7 w30"))) + "\n")
    result = run(
        "bench", "decoder", "--target", str(folders["target"]), "--draft", str(folders["draft"]),
        "--prompts", str(prompts), "--max-new-tokens", "5", "--repeats", "1", "--json",
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["prompts"] == 2 and all(race["tokens_equal"] for race in payload["races"])
    alone = run("bench", "decoder", "--prompts", str(prompts))
    assert alone.exit_code == 2 and "error: --prompts FILE: needs --target and --draft" in alone.output
    missing = run("bench", "decoder", "--target", str(folders["target"]), "--draft", str(folders["draft"]), "--prompts", "nope.jsonl")
    assert missing.exit_code == 2 and "error: nope.jsonl: no such prompt file" in missing.output


def test_generate_with_a_draft_policy_is_the_targets_greedy_output(folders):
    chain = f"{folders['target']},{folders['draft']}"
    plain = json.loads(run("generate", "--chain", chain, "--max-new-tokens", "12", "--json", PROMPT).stdout)
    for extra in (["--draft-cap", "1..8"], ["--p-min", "0.3"], ["--block-sizes", "3", "--draft-cap", "2..6", "--p-min", "0.5"]):
        result = run("generate", "--chain", chain, *extra, "--max-new-tokens", "12", "--json", PROMPT)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["token_ids"] == plain["token_ids"]


def test_a_confidence_stop_on_a_rule_drafter_is_one_line(folders, tmp_path):
    models = tmp_path / "models.yaml"
    models.write_text(f"candidates:\n  - name: t\n    source: {folders['target']}\n    target: true\n"
                      "  - name: lookup\n    derive: {kind: ngram-simple, size_n: 2}\n")
    result = run("generate", "--candidates", str(models), "--chain", "t,lookup", "--p-min", "0.5", PROMPT)
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert "error: draft_policy: p_min 0.5 stops a model drafter on its confidence; 'lookup' drafts by rule and has none" in result.output
