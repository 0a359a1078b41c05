"""The shipped family: it loads offline through examples/zoo.yaml and meets the issue's numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyplan.formats.candidates import default_candidates_path, read_candidates
from polyplan.cli.app import app
from polyplan.models.builtin import builtin_folder, builtin_names, weights_root

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "zoo.yaml"


@pytest.fixture(scope="module")
def family() -> dict:
    return json.loads((weights_root() / "family.json").read_text())


def test_the_shipped_family_is_complete(family):
    assert set(builtin_names()) >= {"target", "drafter"}
    for name in ("target", "drafter"):
        folder = builtin_folder(name)
        for file in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
            assert (folder / file).is_file(), folder / file
    assert family["recipe"]["name"] == "full"


def test_shipped_numbers_meet_the_issue(family):
    report = family["report"]
    losses = report["validation_loss"]
    drafters = [name for name in losses if name not in ("target", "target-int8")]
    assert drafters, losses
    assert all(losses["target"] < losses[name] for name in drafters)
    assert report["greedy_agreement_with_target"]["target-int8"] >= 0.9
    assert report["parameters"]["target"] > 10 * report["parameters"]["drafter"]


def test_examples_zoo_yaml_is_the_default_and_lists_every_kind():
    assert default_candidates_path().resolve() == EXAMPLE.resolve()
    candidates = read_candidates(EXAMPLE)
    kinds = {type(c.derive).__name__ if c.derive else c.source_kind for c in candidates.candidates}
    assert kinds == {"builtin", "Quantize", "EarlyExit", "NGram"}
    assert candidates.target.source == "builtin:target"


def test_models_check_on_the_shipped_family(monkeypatch, family):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = CliRunner().invoke(app, ["models", "check", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["compatible"]
    rows = {row["name"]: row for row in payload["models"]}
    assert set(rows) == {"target", "target-int8", "drafter", "target-exit2", "ngram"}
    assert rows["target"]["validation_loss"] == pytest.approx(family["report"]["validation_loss"]["target"])
    assert rows["target-int8"]["dtype"].startswith("int8")
    assert rows["ngram"]["parameters"] is None and rows["ngram"]["validation_loss"] is None
