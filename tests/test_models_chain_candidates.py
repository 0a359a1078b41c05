"""Plan -> chain, resolved once (`models.chain_candidates`): `ChainCandidates.from_plan` and
`from_names` on the shipped family (examples/zoo.yaml), what they hand generate, validate and
bench (members in chain order, tokenizer, vocabulary, block sizes, widths, temperature), and
that only the chain's members are fingerprinted."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import synthetic_plan
from polyplan.formats.errors import PolyplanError
from polyplan.formats.plan import read_plan
from polyplan.models.builtin import builtin_folder
from polyplan.models.chain_candidates import ChainCandidates

pytestmark = pytest.mark.usefixtures("single_thread")

ZOO = Path(__file__).resolve().parents[1] / "examples" / "zoo.yaml"
TIMES = {"target": 0.01, "target-int8": 0.004, "drafter": 0.003, "ngram": 0.0002}
PAIRS = {("target", "target-int8"): 0.95, ("target", "ngram"): 0.3, ("target-int8", "ngram"): 0.3,
         ("target", "drafter"): 0.2, ("target-int8", "drafter"): 0.2, ("drafter", "ngram"): 0.2}


def _plan(folder: Path, sampling: str = "greedy") -> Path:
    """A plan of the shipped family from a synthetic profile with the models' real fingerprints:
    its chain is target > target-int8 > ngram (the drafter, profiled, agrees too rarely)."""
    return synthetic_plan(folder, ZOO, TIMES, PAIRS, sampling=sampling)


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> Path:
    return _plan(tmp_path_factory.mktemp("plan"))


def test_from_names_resolves_named_and_derived_members_then_loads_them_in_chain_order():
    resolved = ChainCandidates.from_names(ZOO, ["target", "target-int8", "ngram"], block_sizes=(3, 2))
    assert resolved.chain == ("target", "target-int8", "ngram")
    assert [c.name for c in resolved.candidates.candidates] == ["target", "target-int8", "ngram"]
    assert resolved.block_sizes == (3, 2) and resolved.temperature == 0.0 and resolved.plan is None
    loaded = resolved.load()
    assert [member.name for member in loaded.members] == ["target", "target-int8", "ngram"]
    assert loaded.vocab == len(loaded.tokenizer) == loaded.members[0].valid_vocab_size
    assert set(loaded.by_name) == {"target", "target-int8", "ngram"}  # nothing of models.yaml besides


def test_from_names_brings_the_base_of_a_derived_member_and_names_folders():
    resolved = ChainCandidates.from_names(ZOO, [str(builtin_folder("target")), "target-exit2"])
    assert resolved.chain == ("target#2", "target-exit2")  # the folder is named after itself, not the file's target
    assert [c.name for c in resolved.candidates.candidates] == ["target#2", "target-exit2", "target"]
    assert resolved.labels == {"target#2": "chain member 0 ('target#2')"}


def test_from_names_refuses_before_any_load():
    with pytest.raises(PolyplanError, match="chain: empty"):
        ChainCandidates.from_names(ZOO, [])
    with pytest.raises(PolyplanError, match="'nope' is neither a candidate of"):
        ChainCandidates.from_names(ZOO, ["target", "nope"])
    with pytest.raises(PolyplanError, match="an n-gram drafter cannot be the target"):
        ChainCandidates.from_names(ZOO, ["ngram"])


def test_from_plan_gives_the_plan_s_chain_block_sizes_widths_and_sampling(plan):
    planned = read_plan(plan)
    assert planned.chain == ("target", "target-int8", "ngram")
    resolved = ChainCandidates.from_plan(plan)
    assert resolved.chain == planned.chain and resolved.plan == planned
    assert resolved.block_sizes == planned.block_sizes and resolved.verify_widths == planned.best.verify_widths
    assert resolved.temperature == 0.0
    assert [c.name for c in resolved.candidates.candidates] == ["target", "target-int8", "ngram"]
    loaded = resolved.load()
    assert [member.name for member in loaded.members] == list(planned.chain)


def test_a_sampled_plan_gives_its_temperature(tmp_path):
    assert ChainCandidates.from_plan(_plan(tmp_path, "t0.8")).temperature == 0.8


def test_from_plan_also_resolves_the_other_chains_a_command_runs(plan):
    resolved = ChainCandidates.from_plan(plan, also=[("target", "drafter")])
    assert resolved.chain == ("target", "target-int8", "ngram")  # still the plan's own chain
    assert [c.name for c in resolved.candidates.candidates] == ["target", "target-int8", "ngram", "drafter"]


def test_only_the_chain_s_members_are_fingerprinted(plan, monkeypatch):
    import polyplan.models.fingerprints as fingerprints

    hashed = []
    real = fingerprints.file_fingerprint
    monkeypatch.setattr(fingerprints, "file_fingerprint", lambda path: hashed.append(Path(path)) or real(path))
    ChainCandidates.from_plan(plan)
    assert hashed == [builtin_folder("target")]  # target-int8 and ngram derive from it; the drafter is not read
    hashed.clear()
    ChainCandidates.from_plan(plan, also=[("target", "drafter")])
    assert sorted(hashed) == sorted([builtin_folder("target"), builtin_folder("drafter")])  # negative control


def test_a_changed_model_outside_the_chain_does_not_stop_it_one_inside_does(plan, tmp_path):
    outside = tmp_path / "outside.yaml"
    outside.write_text(ZOO.read_text().replace("source: builtin:drafter", "source: builtin:target"))  # the drafter's files
    assert ChainCandidates.from_plan(plan, models_yaml=outside).chain == ("target", "target-int8", "ngram")
    with pytest.raises(PolyplanError, match="model 'drafter' changed since the plan was made"):
        ChainCandidates.from_plan(plan, models_yaml=outside, also=[("target", "drafter")])
    inside = tmp_path / "inside.yaml"
    inside.write_text(ZOO.read_text().replace("max_n: 4", "max_n: 3"))
    with pytest.raises(PolyplanError, match="model 'ngram' changed since the plan was made"):
        ChainCandidates.from_plan(plan, models_yaml=inside)


def test_from_plan_places_the_members_on_a_device(plan):
    resolved = ChainCandidates.from_plan(plan, device="cpu")
    assert {c.device for c in resolved.candidates.candidates} == {"cpu"}
