"""Loading models.yaml into chain members: every derived kind, the compatibility check, bad files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import save_model, tiny_llama, tiny_tokenizer
from polyplan.formats.candidates import parse_candidates
from polyplan.decoder.ngram_simple import NGramSimpleMember
from polyplan.decoder import HFMember, NGramMember, Sampling, generate
from polyplan.models.loader import load_candidates
from polyplan.formats.errors import PolyplanError


@pytest.fixture(scope="module")
def family(tmp_path_factory) -> Path:
    """A target (3 layers), a drafter (1 layer) and a 'padded' model with 8 extra logit rows."""
    root = tmp_path_factory.mktemp("family")
    tokenizer = tiny_tokenizer()
    save_model(root / "target", tiny_llama(0, layers=3), tokenizer)
    save_model(root / "drafter", tiny_llama(1, layers=1), tokenizer)
    save_model(root / "padded", tiny_llama(2, layers=1, vocab=72), tokenizer)
    return root


def load(entries, base: Path, **options):
    return load_candidates(parse_candidates({"candidates": entries}, base_dir=base, origin="m.yaml"), **options)


FULL = [
    {"name": "target", "source": "target", "target": True},
    {"name": "target-int8", "derive": {"from": "target", "quantize": "int8"}},
    {"name": "exit1", "derive": {"from": "target", "layers": 1}},
    {"name": "exit1-int8", "derive": {"from": "exit1", "quantize": "int8"}},
    {"name": "drafter", "source": "drafter"},
    {"name": "ngram", "derive": {"kind": "ngram", "max_n": 3}},
    {"name": "ngram-simple", "derive": {"kind": "ngram-simple", "size_n": 2}},
]


def test_every_kind_loads_with_its_facts(family):
    loaded = load(FULL, family)
    assert loaded.compatible
    facts = {item.candidate.name: item for item in loaded.candidates}
    assert list(facts) == [e["name"] for e in FULL]
    assert isinstance(facts["ngram"].member, NGramMember) and facts["ngram"].parameters is None
    assert isinstance(facts["exit1"].member, HFMember)
    assert facts["exit1"].member.model.config.num_hidden_layers == 1
    assert facts["target"].member.model.config.num_hidden_layers == 3  # the copy shares, never shrinks, the base
    assert facts["exit1"].parameters < facts["target"].parameters
    assert facts["target-int8"].dtype.startswith("int8") and facts["target"].dtype == "float32"
    linear = type(facts["target-int8"].member.model.model.layers[0].mlp.down_proj)
    assert "quantized" in linear.__module__
    assert facts["ngram"].member.vocab_size == 64
    simple = facts["ngram-simple"].member
    assert isinstance(simple, NGramSimpleMember) and simple.size_n == 2 and simple.vocab_size == 64


@pytest.fixture(scope="module")
def loaded_full(family):
    return load(FULL, family)


@pytest.mark.parametrize(
    "chain, blocks",
    [
        (["target", "target-int8"], [3]),
        (["target", "exit1"], [2]),
        (["target", "drafter"], [4]),
        (["target", "ngram"], [3]),
        (["target", "target-int8", "exit1-int8", "ngram"], [4, 2, 2]),
    ],
)
def test_derived_members_run_in_a_lossless_chain(loaded_full, chain, blocks):
    loaded = loaded_full
    prompt = loaded.tokenizer("w5 w9 w11 w5 w9")["input_ids"]
    greedy = Sampling(temperature=0.0)
    reference = generate(loaded.chain(["target"]), prompt, max_new_tokens=24, sampling=greedy).token_ids
    result = generate(loaded.chain(chain), prompt, max_new_tokens=24, block_sizes=blocks, sampling=greedy)
    assert result.token_ids == reference
    assert len(result.levels) == len(chain)


def test_a_different_tokenizer_is_reported_and_refused(tmp_path, family):
    other = tiny_tokenizer()
    other.add_tokens(["extra"])
    save_model(tmp_path / "other", tiny_llama(3, layers=1, vocab=65), other)
    entries = [{"name": "target", "source": str(family / "target"), "target": True}, {"name": "odd", "source": "other"}]
    loaded = load(entries, tmp_path, require_compatible=False)
    verdict = {c.name: c for c in loaded.compatibility}
    assert verdict["target"].ok and not verdict["odd"].ok
    assert "tokenizer differs" in verdict["odd"].detail and "extra" in verdict["odd"].detail
    with pytest.raises(PolyplanError, match="candidate 'odd': tokenizer differs"):
        load(entries, tmp_path)


def test_different_special_tokens_are_refused(tmp_path, family):
    tokenizer = tiny_tokenizer()
    tokenizer.eos_token = "<s>"  # same map, different role
    save_model(tmp_path / "other", tiny_llama(3, layers=1), tokenizer)
    entries = [{"name": "target", "source": str(family / "target"), "target": True}, {"name": "odd", "source": "other"}]
    with pytest.raises(PolyplanError, match="candidate 'odd': special token eos_token"):
        load(entries, tmp_path)


def test_padded_rows_need_a_declaration_and_are_then_masked(family):
    undeclared = [FULL[0], {"name": "padded", "source": "padded"}]
    with pytest.raises(PolyplanError, match="candidate 'padded': 72 logit rows for 64 tokens; declare 'padded_vocab: true'"):
        load(undeclared, family)
    declared = [FULL[0], {"name": "padded", "source": "padded", "padded_vocab": True}]
    loaded = load(declared, family)
    member = loaded.member("padded")
    assert member.vocab_size == 72 and member.valid_vocab_size == 64
    logits = member.forward(torch.tensor([5, 6]))
    assert torch.isinf(logits[:, 64:]).all() and torch.isfinite(logits[:, :64]).all()
    prompt = [5, 9, 11]
    greedy = Sampling(temperature=0.0)
    reference = generate(loaded.chain(["target"]), prompt, max_new_tokens=12, sampling=greedy).token_ids
    assert generate(loaded.chain(["target", "padded"]), prompt, max_new_tokens=12, block_sizes=[3], sampling=greedy).token_ids == reference


def test_layers_deeper_than_the_model(family):
    entries = [FULL[0], {"name": "deep", "derive": {"from": "target", "layers": 4}}]
    with pytest.raises(PolyplanError, match="candidate 'deep': layers 4 is larger than 'target', which has 3 layers"):
        load(entries, family)


def test_corrupt_safetensors(tmp_path, family):
    save_model(tmp_path / "broken", tiny_llama(0, layers=1), tiny_tokenizer())
    weights = tmp_path / "broken" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    entries = [{"name": "broken", "source": "broken", "target": True}]
    with pytest.raises(PolyplanError) as raised:
        load(entries, tmp_path)
    assert "candidate 'broken': corrupt or unreadable weights" in str(raised.value)
    assert "\n" not in str(raised.value)


def test_uncached_hub_id_offline_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    entries = [{"name": "remote", "source": "no-such-org/no-such-model", "target": True}]
    with pytest.raises(PolyplanError, match="candidate 'remote': hub id 'no-such-org/no-such-model' is not in the local cache"):
        load(entries, tmp_path)
