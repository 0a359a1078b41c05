"""`polyplan drafter distill` on tiny settings: a reduced-vocabulary drafter for the shipped
target that loads as a `source:` candidate and keeps the chain lossless; its loss stays finite."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from polyplan.formats.candidates import default_candidates_path, parse_candidates
from polyplan.cli import app
from polyplan.decoder import generate
from polyplan.decoder.candidates_loader import load_candidates
from polyplan.decoder.reduced_vocab import REDUCED_VOCAB_FILE
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
