"""`polyplan drafter distill` on tiny settings: a reduced-vocabulary drafter for the shipped
target that loads as a `source:` candidate and keeps the chain lossless; its loss stays finite."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from polyplan.formats.candidates import default_candidates_path, parse_candidates
from polyplan.cli.app import app
from polyplan.decoder import generate
from polyplan.models.loader import load_candidates
from polyplan.models.reduced_vocab import REDUCED_VOCAB_FILE
from polyplan.zoo.refine import distillation_loss

pytestmark = pytest.mark.usefixtures("single_thread")


def test_distillation_loss_is_finite_for_a_reduced_drafter():
    target = torch.randn(5, 10)
    drafter = torch.randn(5, 10, requires_grad=True)
    masked = drafter.masked_fill(torch.arange(10) >= 6, -torch.inf)  # q = 0 on ids 6..9
    loss, tv = distillation_loss(target, masked)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(drafter.grad).all() and 0 < tv < 1
    full_loss, _ = distillation_loss(target, drafter.detach())
    assert torch.isfinite(full_loss)


def test_quick_distill_writes_a_drafter_that_chains_losslessly(tmp_path):
    out = tmp_path / "drafter"
    result = CliRunner().invoke(app, ["drafter", "distill", "--quick", "--out", str(out), "--candidates", str(default_candidates_path())])
    assert result.exit_code == 0, result.output
    assert "head over 256 of 2048 tokens" in result.stdout and "held-out alpha" in result.stdout
    record = json.loads((out / REDUCED_VOCAB_FILE).read_text())
    assert len(record["kept_ids"]) == 256 and 0 in record["kept_ids"]  # <|endoftext|>, the EOS id, always kept
    candidates = parse_candidates(
        {"candidates": [{"name": "target", "source": "builtin:target", "target": True}, {"name": "reduced", "source": str(out)}]},
        base_dir=tmp_path, origin="m.yaml",
    )
    loaded = load_candidates(candidates)
    assert all(check.ok for check in loaded.compatibility)
    reduced = loaded.member("reduced")
    logits = reduced.forward(torch.tensor([265, 332, 351]), keep_last=1)[0]
    outside = torch.ones(2048, dtype=torch.bool)
    outside[record["kept_ids"]] = False
    assert torch.isinf(logits[outside]).all() and torch.isfinite(logits[~outside]).all()
    target = loaded.member("target")
    prompt = loaded.tokenizer("def add(a, b):\n")["input_ids"]
    assert generate([target, reduced], prompt, max_new_tokens=12, block_sizes=[3]).token_ids == \
        generate([target], prompt, max_new_tokens=12).token_ids
    again = CliRunner().invoke(app, ["drafter", "distill", "--quick", "--out", str(out)])
    assert again.exit_code == 2 and "error: --out: " in again.output and "already exists" in again.output


def test_quick_refuses_size_options(tmp_path):
    result = CliRunner().invoke(app, ["drafter", "distill", "--quick", "--vocab", "64", "--out", str(tmp_path / "d")])
    assert result.exit_code == 2 and "error: --quick: sets every size itself; drop --vocab" in result.output
    assert not (tmp_path / "d").exists()


def test_quick_distill_reads_user_data_and_reports_on_policy_alpha(tmp_path):
    data = tmp_path / "mine.jsonl"
    data.write_text("\n".join(json.dumps({"turns": [f"Explain step {i} of sorting a list in Python."]}) for i in range(4)) + "\n")
    out = tmp_path / "drafter"
    result = CliRunner().invoke(app, ["drafter", "distill", "--quick", "--out", str(out), "--data", str(data)])
    assert result.exit_code == 0, result.output
    assert "on-policy alpha" in result.stdout
    record = json.loads((out / REDUCED_VOCAB_FILE).read_text())
    assert record["data"] == str(data) and set(record["on_policy_alpha"]) == {"before", "after"}


def test_a_missing_data_file_fails_before_any_model_loads(tmp_path):
    result = CliRunner().invoke(app, ["drafter", "distill", "--quick", "--out", str(tmp_path / "d"), "--data", str(tmp_path / "none.txt")])
    assert result.exit_code == 2 and "none.txt: no such prompt file" in result.output
    assert not (tmp_path / "d").exists()


def test_training_data_mixes_code_prose_and_user_text():
    from transformers import AutoTokenizer

    from polyplan.models.builtin import builtin_folder
    from polyplan.zoo.distill import QUICK, stdlib_prose, training_data

    tokenizer = AutoTokenizer.from_pretrained(builtin_folder("target"))
    without = training_data(tokenizer, QUICK)
    with_user = training_data(tokenizer, QUICK, ["an unusual user sentence"] * 40)
    assert with_user.train.numel() > without.train.numel() and with_user.held_out.numel() > without.held_out.numel()
    prose = stdlib_prose(10_000)
    assert prose and sum(map(len, prose)) >= 10_000 and "the" in prose[0]


def test_projected_embeddings_keep_the_geometry_of_the_kept_rows():
    from polyplan.zoo.distill import projected_embeddings

    torch.manual_seed(0)
    basis = torch.randn(4, 16)
    embeddings = torch.randn(100, 4) @ basis  # rank 4: a 4-wide projection loses nothing
    keep = torch.arange(0, 100, 2)
    projected = projected_embeddings(embeddings, keep, 8, std=0.02)
    assert projected.shape == (100, 8)
    assert torch.allclose(projected[keep].std(), torch.tensor(0.02), rtol=1e-3)
    assert torch.count_nonzero(projected[:, 4:].abs() > 1e-5) == 0  # rank 4: nothing beyond it
    scale = projected.norm() / embeddings.norm()  # a rotation and one scale: inner products kept
    torch.testing.assert_close(projected @ projected.T, (embeddings @ embeddings.T) * scale**2, rtol=1e-3, atol=1e-7)
    narrow = projected_embeddings(torch.randn(10, 4), torch.arange(10), 6, std=1.0)
    assert narrow.shape == (10, 6) and torch.equal(narrow[:, 4:], torch.zeros(10, 2))


def test_quick_exit_trains_only_the_norm_and_head_and_chains_losslessly(tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from polyplan.models.reduced_vocab import REDUCED_HEAD_FILE
    from polyplan.models.builtin import builtin_folder

    out = tmp_path / "exit2"
    result = CliRunner().invoke(app, ["drafter", "distill", "--quick", "--exit-layers", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    record = json.loads((out / REDUCED_VOCAB_FILE).read_text())
    assert record["exit_layers"] == 2 and len(record["kept_ids"]) == 256
    saved = load_file(str(out / "model.safetensors"))
    assert not any(key.startswith("lm_head") for key in saved)  # tied: no V-row head written
    assert load_file(str(out / REDUCED_HEAD_FILE))["weight"].shape == (256, saved["model.embed_tokens.weight"].shape[1])
    target = AutoModelForCausalLM.from_pretrained(builtin_folder("target"), dtype=torch.float32)
    original = target.state_dict()
    for key, value in saved.items():
        if key.startswith("model.layers.") or key == "model.embed_tokens.weight":  # the target's own, frozen
            assert torch.equal(value.float(), original[key].float()), key
    assert not torch.equal(saved["model.norm.weight"].float(), original["model.norm.weight"].float())  # trained
    candidates = parse_candidates(
        {"candidates": [{"name": "target", "source": "builtin:target", "target": True}, {"name": "exit2", "source": str(out)}]},
        base_dir=tmp_path, origin="m.yaml",
    )
    loaded = load_candidates(candidates)
    exit_member, target_member = loaded.member("exit2"), loaded.member("target")
    assert exit_member.model.config.num_hidden_layers == 2
    prompt = loaded.tokenizer("def add(a, b):\n")["input_ids"]
    assert generate([target_member, exit_member], prompt, max_new_tokens=12, block_sizes=[3]).token_ids == \
        generate([target_member], prompt, max_new_tokens=12).token_ids


def test_exit_layers_must_leave_the_target_deeper(tmp_path):
    result = CliRunner().invoke(app, ["drafter", "distill", "--quick", "--exit-layers", "8", "--out", str(tmp_path / "e")])
    assert result.exit_code == 2 and "error: --exit-layers: 8 is outside 1..7" in result.output
    assert not (tmp_path / "e").exists()


def test_the_loss_over_the_support_equals_the_full_loss_when_both_are_restricted():
    torch.manual_seed(3)
    keep = torch.tensor([1, 4, 6, 9])
    outside = torch.ones(12, dtype=torch.bool)
    outside[keep] = False
    teacher = torch.randn(5, 12).masked_fill(outside, -torch.inf)
    drafter = torch.randn(5, 12).masked_fill(outside, -torch.inf)
    full_loss, full_tv = distillation_loss(teacher, drafter)
    sliced_loss, sliced_tv = distillation_loss(teacher[:, keep], drafter[:, keep])
    torch.testing.assert_close(sliced_loss, full_loss)
    torch.testing.assert_close(sliced_tv, full_tv)


def test_raw_prompts_without_data_is_refused(tmp_path):
    result = CliRunner().invoke(app, ["drafter", "distill", "--quick", "--raw-prompts", "--out", str(tmp_path / "d")])
    assert result.exit_code == 2 and "error: --raw-prompts: only used with --data" in result.output
    assert not (tmp_path / "d").exists()
