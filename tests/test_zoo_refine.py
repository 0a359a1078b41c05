"""The drafter's refinement stage: its loss is the acceptance rate's complement, and
`polyplan zoo refine` writes a complete family without touching the target."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from polyplan.cli.app import app
from polyplan.zoo.recipe import QUICK
from polyplan.zoo.refine import acceptance_on, distillation_loss, greedy_continuations
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
    fit = acceptance_on(model, model, windows)
    assert fit.alpha == pytest.approx(1.0, abs=1e-5) and fit.agreement == 1.0
    fit = acceptance_on(model, perturbed_copy(model, 0.5, seed=3), windows)
    assert 0 < fit.alpha < 1 and 0 <= fit.agreement <= 1


def test_greedy_continuations_are_what_the_model_picks_one_token_at_a_time():
    model = tiny_llama(0)
    prompts = torch.randint(4, 64, (3, 5), generator=torch.Generator().manual_seed(4))
    rows = greedy_continuations(model, prompts, 6)
    assert rows.shape == (3, 11) and torch.equal(rows[:, :5], prompts)
    with torch.inference_mode():
        for row in rows:  # no cache: the full sequence's argmax at each position
            argmax = model(row[None, :-1]).logits[0].argmax(-1)
            assert torch.equal(argmax[4:], row[5:])


def _digest(folder: Path) -> str:
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def refined(tmp_path_factory, quick_family) -> tuple[Path, Path, str]:
    family = quick_family  # conftest's, trained once for this module and test_zoo_train; refine only reads it
    out = tmp_path_factory.mktemp("refine") / "refined"
    result = runner.invoke(app, ["zoo", "refine", "--family", str(family), "--out", str(out), "--steps", "3"])
    return family, out, result.output


def test_refine_writes_a_family_with_a_new_drafter_and_the_same_target(refined):
    family, out, output = refined
    assert "held-out corpus" in output and "target's own continuations" in output
    assert _digest(out / "target") == _digest(family / "target")
    assert _digest(out / "drafter") != _digest(family / "drafter")
    for name in ("tokenizer.json", "tokenizer_config.json"):  # the token map stays exactly the same
        assert (out / "drafter" / name).read_bytes() == (family / "drafter" / name).read_bytes()
    payload = json.loads((out / "family.json").read_text())
    assert payload["recipe"]["drafter_refine"]["schedule"]["steps"] == 3
    refine = payload["report"]["refine"]
    for key in ("corpus_before", "corpus_after", "on_policy_before", "on_policy_after"):
        assert 0 < refine[key]["alpha"] < 1 and 0 <= refine[key]["agreement"] <= 1
    assert 0 <= payload["report"]["greedy_agreement_with_target"]["drafter"] <= 1
    assert not [p for p in out.parent.iterdir() if "partial" in p.name]


def test_the_quick_recipe_runs_the_refine_stage(refined):
    family, _, _ = refined
    payload = json.loads((family / "family.json").read_text())
    assert payload["recipe"]["drafter_refine"] == asdict(QUICK.drafter_refine)
    assert payload["report"]["refine"]["seconds"] > 0 and payload["report"]["refine"]["generation_seconds"] > 0


def test_refine_refuses_an_existing_out_and_a_folder_without_a_family(refined, tmp_path):
    family, out, _ = refined
    result = runner.invoke(app, ["zoo", "refine", "--family", str(family), "--out", str(out), "--steps", "1"])
    assert result.exit_code == 2 and "already exists" in result.output
    result = runner.invoke(app, ["zoo", "refine", "--family", str(tmp_path), "--out", str(tmp_path / "x"), "--steps", "1"])
    assert result.exit_code == 2 and "no family.json" in result.output
    result = runner.invoke(app, ["zoo", "refine", "--family", str(family), "--out", str(tmp_path / "y"), "--steps", "0"])
    assert result.exit_code == 2 and "--steps" in result.output
