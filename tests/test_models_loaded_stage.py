"""A model's loaded stage is one type: `LoadedCandidates`, which the profiler's input
(`ProfiledModel`s with their fingerprints, and the target's device) comes from."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import save_model, tiny_llama, tiny_tokenizer
from polyplan.formats.candidates import parse_candidates
from polyplan.models.fingerprints import ProfiledModel, candidate_fingerprints, load_fingerprinted
from polyplan.models.loader import load_candidates

ENTRIES = [
    {"name": "target", "source": "target", "target": True},
    {"name": "exit1", "derive": {"from": "target", "layers": 1}},
    {"name": "ngram", "derive": {"kind": "ngram", "max_n": 3}},
]


@pytest.fixture(scope="module")
def candidates(tmp_path_factory):
    root: Path = tmp_path_factory.mktemp("stage")
    save_model(root / "target", tiny_llama(0, layers=2), tiny_tokenizer())
    return parse_candidates({"candidates": ENTRIES}, base_dir=root, origin="m.yaml")


def test_fingerprinted_candidates_are_the_profilers_models_target_first(candidates):
    loaded = load_fingerprinted(candidates)
    models = loaded.profiled
    assert all(isinstance(model, ProfiledModel) for model in models)
    assert [model.name for model in models] == [entry["name"] for entry in ENTRIES]
    assert {model.name: model.fingerprint for model in models} == candidate_fingerprints(candidates)
    assert [model.member for model in models] == [item.member for item in loaded.candidates]
    assert loaded.device == candidates.target.device == "cpu"
    assert loaded.compatible and loaded.tokenizer is not None


def test_candidates_loaded_to_run_are_not_fingerprinted(candidates):
    """The negative control: only a load for profiling hashes the models' files."""
    loaded = load_candidates(candidates)
    assert [item.fingerprint for item in loaded.candidates] == [None] * len(ENTRIES)
    with pytest.raises(ValueError, match="not fingerprinted .*: target, exit1, ngram"):
        loaded.profiled
