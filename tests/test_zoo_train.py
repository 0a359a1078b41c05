"""`polyplan zoo train --quick`: a small family in HF format, written atomically."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyplan.cli.app import app
from polyplan.formats.errors import PolyplanError
from polyplan.zoo import train as train_module
from polyplan.models.corpus import split_stdlib
from polyplan.zoo.recipe import QUICK

runner = CliRunner()


def test_quick_family_is_loadable_by_transformers(quick_family):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for name in ("target", "drafter"):
        model = AutoModelForCausalLM.from_pretrained(quick_family / name, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(quick_family / name, local_files_only=True)
        assert model.config.vocab_size == len(tokenizer) == QUICK.vocab_size
        code = "def f(x):\n    return x + 1\n"
        assert tokenizer.decode(tokenizer(code)["input_ids"]) == code
    target = AutoModelForCausalLM.from_pretrained(quick_family / "target", local_files_only=True)
    assert target.config.num_hidden_layers == QUICK.target.num_layers


def test_family_json_records_the_recipe_and_measurements(quick_family):
    payload = json.loads((quick_family / "family.json").read_text())
    report = payload["report"]
    assert report["seed"] == 3 and payload["recipe"]["name"] == "quick"
    names = {"target", "target-int8", f"target-exit{QUICK.early_exit_layers}", "drafter"}
    assert set(report["validation_loss"]) == names
    assert all(0 < loss < 10 for loss in report["validation_loss"].values())
    assert 0 <= report["greedy_agreement_with_target"]["drafter"] <= 1
    assert not [p for p in quick_family.parent.iterdir() if "partial" in p.name]


def test_models_check_on_a_trained_family(quick_family, tmp_path):
    yaml_file = tmp_path / "models.yaml"
    yaml_file.write_text(
        "candidates:\n"
        f"  - {{name: t, source: {quick_family / 'target'}, target: true}}\n"
        "  - {name: t8, derive: {from: t, quantize: int8}}\n"
        f"  - {{name: d, source: {quick_family / 'drafter'}}}\n"
        "  - {name: x1, derive: {from: t, layers: 1}}\n"
        "  - {name: ng, derive: {kind: ngram}}\n"
    )
    result = runner.invoke(app, ["models", "check", "--candidates", str(yaml_file)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "parameters" in lines[1] and "compatibility" in lines[1]
    rows = {line.split()[0]: line for line in lines[2:]}
    assert set(rows) == {"t", "t8", "d", "x1", "ng"}
    assert "int8 (dynamic)" in rows["t8"] and rows["t"].rstrip().endswith("ok")
    json_result = runner.invoke(app, ["models", "check", "--candidates", str(yaml_file), "--json"])
    assert json.loads(json_result.output)["compatible"] is True


def test_models_check_fails_on_a_differing_tokenizer(quick_family, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(quick_family / "drafter", other)
    # Same size, two ids swapped: what a tokenizer retrained on other data looks like.
    data = json.loads((other / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[300:302]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (other / "tokenizer.json").write_text(json.dumps(data))
    yaml_file = tmp_path / "models.yaml"
    yaml_file.write_text(
        "candidates:\n"
        f"  - {{name: t, source: {quick_family / 'target'}, target: true}}\n"
        f"  - {{name: odd, source: {other}}}\n"
    )
    result = runner.invoke(app, ["models", "check", "--candidates", str(yaml_file)])
    assert result.exit_code == 2
    assert "candidate 'odd'" in result.output and "tokenizer differs" in result.output
    assert result.output.count("error:") == 1


def test_existing_out_folder_is_refused(quick_family):
    result = runner.invoke(app, ["zoo", "train", "--quick", "--out", str(quick_family)])
    assert result.exit_code == 2 and "already exists" in result.output


def test_a_killed_run_leaves_no_folder_that_looks_complete(tmp_path, monkeypatch):
    def killed(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "train_pair", killed)
    with pytest.raises(KeyboardInterrupt):
        train_module.train_family(QUICK, tmp_path / "family", seed=0, log=lambda _line: None)
    assert list(tmp_path.iterdir()) == []


def test_corpus_split_is_deterministic_and_disjoint():
    first, second = split_stdlib(), split_stdlib()
    assert first == second
    assert first.validation and first.train
    assert not set(first.train) & set(first.validation)
    assert not any(part in ("test", "tests") for path in first.train for part in Path(path).parts)


def test_missing_stdlib_is_a_clear_error(tmp_path):
    with pytest.raises(PolyplanError, match="no Python files"):
        split_stdlib(tmp_path)
