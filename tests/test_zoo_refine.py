"""The drafter's refinement stage: its loss is the acceptance rate's complement, and
`polyplan zoo refine` writes a complete family without touching the target."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from polyplan.cli import app
from polyplan.zoo import train as train_module
from polyplan.zoo.recipe import QUICK, Schedule
from polyplan.zoo.refine import acceptance_on, distillation_loss
from conftest import perturbed_copy, tiny_llama

runner = CliRunner()


def test_total_variation_is_one_minus_the_acceptance_rate():
    generator = torch.Generator().manual_seed(0)
    p_logits, q_logits = torch.randn(50, 30, generator=generator), torch.randn(50, 30, generator=generator)
    _, tv = distillation_loss(p_logits, q_logits)
    alpha = torch.minimum(p_logits.softmax(-1), q_logits.softmax(-1)).sum(-1).mean()
    assert tv.item() == pytest.approx(1 - alpha.item(), abs=1e-6)


def test_loss_vanishes_only_when_the_drafter_matches():
    logits = torch.randn(20, 16, generator=torch.Generator().manual_seed(1))
    loss, tv = distillation_loss(logits, logits.clone())
    assert loss.item() == pytest.approx(0, abs=1e-6) and tv.item() == pytest.approx(0, abs=1e-6)
    loss, _ = distillation_loss(logits, logits.flip(-1))
    assert loss.item() > 0.1


def test_acceptance_of_a_model_with_itself_is_one():
    model = tiny_llama(0)
    windows = torch.randint(0, 64, (3, 17), generator=torch.Generator().manual_seed(2))
    alpha, agreement = acceptance_on(model, model, windows)
    assert alpha == pytest.approx(1.0, abs=1e-5) and agreement == 1.0
    alpha, agreement = acceptance_on(model, perturbed_copy(model, 0.5, seed=3), windows)
    assert 0 < alpha < 1 and 0 <= agreement <= 1


def _digest(folder: Path) -> str:
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def refined(tmp_path_factory) -> tuple[Path, Path, str]:
    root = tmp_path_factory.mktemp("refine")
    family = root / "family"
    train_module.train_family(QUICK, family, seed=1, log=lambda _line: None)
    out = root / "refined"
    result = runner.invoke(app, ["zoo", "refine", "--family", str(family), "--out", str(out), "--steps", "3"])
    return family, out, result.output


def test_refine_writes_a_family_with_a_new_drafter_and_the_same_target(refined):
    family, out, output = refined
    assert "drafter alpha" in output and "greedy agreement" in output
    assert _digest(out / "target") == _digest(family / "target")
    assert _digest(out / "drafter") != _digest(family / "drafter")
    for name in ("tokenizer.json", "tokenizer_config.json"):  # the token map stays exactly the same
        assert (out / "drafter" / name).read_bytes() == (family / "drafter" / name).read_bytes()
    payload = json.loads((out / "family.json").read_text())
    assert payload["recipe"]["drafter_refine"]["steps"] == 3
    refine = payload["report"]["refine"]
    assert 0 < refine["alpha_before"] < 1 and 0 < refine["alpha_after"] < 1
    assert payload["report"]["greedy_agreement_with_target"]["drafter"] == pytest.approx(refine["agreement_after"])
    assert not [p for p in out.parent.iterdir() if "partial" in p.name]


def test_the_quick_recipe_runs_the_refine_stage(refined):
    family, _, _ = refined
    payload = json.loads((family / "family.json").read_text())
    assert payload["recipe"]["drafter_refine"] == {**Schedule(4, 8, 1e-3, 1).__dict__}
    assert payload["report"]["refine"]["seconds"] > 0


def test_refine_refuses_an_existing_out_and_a_folder_without_a_family(refined, tmp_path):
    family, out, _ = refined
    result = runner.invoke(app, ["zoo", "refine", "--family", str(family), "--out", str(out), "--steps", "1"])
    assert result.exit_code == 2 and "already exists" in result.output
    result = runner.invoke(app, ["zoo", "refine", "--family", str(tmp_path), "--out", str(tmp_path / "x"), "--steps", "1"])
    assert result.exit_code == 2 and "no family.json" in result.output
    result = runner.invoke(app, ["zoo", "refine", "--family", str(family), "--out", str(tmp_path / "y"), "--steps", "0"])
    assert result.exit_code == 2 and "--steps" in result.output
