"""Bad input: each case ends in one PolyplanError line that names the argument or member."""

from __future__ import annotations

import pytest
import torch

from conftest import save_model, tiny_llama, tiny_tokenizer
from table_member import TableMember
from polyplan.decoder.chain import generate
from polyplan.decoder.hf import HFMember
from polyplan.models.chain_candidates import ChainCandidates
from polyplan.decoder.ngram import NGramMember
from polyplan.decoder.sampling import Sampling
from polyplan.formats.errors import PolyplanError

pytestmark = pytest.mark.usefixtures("single_thread")


def table(vocab: int = 8, name: str = "toy") -> TableMember:
    return TableMember.random(vocab, 1, torch.Generator().manual_seed(0), name=name)


def fails(match: str, chain, prompt=(1, 2), **kwargs) -> str:
    kwargs.setdefault("max_new_tokens", 4)
    with pytest.raises(PolyplanError, match=match) as error:
        generate(chain, list(prompt) if not isinstance(prompt, torch.Tensor) else prompt, **kwargs)
    message = str(error.value)
    assert "\n" not in message
    return message


def test_empty_chain():
    fails(r"^chain: empty", [])


@pytest.mark.parametrize(
    ("size", "blocks", "match"),
    [
        (2, (), r"^block_sizes: a chain of 2 members needs 1 block size"),
        (3, (2,), r"^block_sizes: a chain of 3 members needs 2 block size"),
        (1, (4,), r"^block_sizes: a chain of 1 members needs 0 block size"),
        (3, (2, 0), r"^block_sizes\[1\]: 0 must be an integer >= 1"),
        (2, (-1,), r"^block_sizes\[0\]: -1 must be an integer >= 1"),
        (2, (1.5,), r"^block_sizes\[0\]: 1.5 must be an integer >= 1"),
    ],
)
def test_block_sizes(size, blocks, match):
    fails(match, [table(name=f"m{i}") for i in range(size)], block_sizes=blocks)


def test_sampling_arguments_name_themselves():
    with pytest.raises(PolyplanError, match=r"^temperature: -1"):
        generate([table()], [1], max_new_tokens=2, sampling=Sampling(temperature=-1.0))
    with pytest.raises(PolyplanError, match=r"^top_p: 0"):
        Sampling(temperature=1.0, top_p=0.0)
    with pytest.raises(PolyplanError, match=r"^top_p: 1.01"):
        Sampling(temperature=1.0, top_p=1.01)


def test_batches_are_not_supported():
    message = fails(r"^prompt_ids: batch size 2 is not supported", [table()], prompt=torch.tensor([[1, 2], [3, 4]]))
    assert "one sequence at a time" in message
    fails(r"^prompt_ids: batch size 3 is not supported", [table()], prompt=[[1], [2], [3]])
    assert generate([table()], torch.tensor([[1, 2]]), max_new_tokens=2).token_ids  # one row is fine


def test_other_prompt_and_length_errors():
    fails(r"^prompt_ids: empty", [table()], prompt=())
    fails(r"^prompt_ids: token ids must lie in \[0, 8\)", [table()], prompt=(1, 8))
    fails(r"^prompt_ids: expected a 1-D", [table()], prompt=torch.zeros(1, 1, 2, dtype=torch.long))
    fails(r"^max_new_tokens: 0 must be", [table()], max_new_tokens=0)


def test_prompt_longer_than_a_members_context():
    model = tiny_llama(0, layers=1, max_context=16)
    chain = [HFMember(model, name="target"), HFMember(model, name="small-draft", max_context=8)]
    message = fails(r"^prompt_ids: 10 tokens is longer than the context of chain member 1 \('small-draft'\)", chain, prompt=range(4, 14), block_sizes=(2,))
    assert "(8 tokens)" in message
    fails(r"^max_new_tokens: prompt \(6\) \+ 12 new tokens \+ 2 drafted ahead exceeds the context of chain member 0 \('target'\)",
          chain[:1] + [NGramMember(64)], prompt=range(4, 10), max_new_tokens=12, block_sizes=(2,))


def _load_folders(*folders):
    """Members of a chain of model folders, through the one loader (folders are ad-hoc candidates)."""
    return list(ChainCandidates.from_names(None, [str(folder) for folder in folders]).load().members)


def test_load_chain_checks_maps_and_special_tokens(tmp_path):
    """The loader is the one place members are checked to share the target's vocabulary
    (`decoder.compatibility`); `generate` takes what it is handed."""
    model = tiny_llama(0, layers=1)
    target = save_model(tmp_path / "target", model, tiny_tokenizer())
    swapped = save_model(tmp_path / "swapped", model, tiny_tokenizer(swap=(4, 60)))
    other_eos = save_model(tmp_path / "other-eos", model, tiny_tokenizer(eos_token="w63"))
    with pytest.raises(PolyplanError, match=r"^chain member 1 \('swapped'\): tokenizer differs from the target 'target'"):
        _load_folders(target, swapped)
    with pytest.raises(PolyplanError, match=r"^chain member 1 \('other-eos'\): special token eos_token is \('w63', 63\)"):
        _load_folders(target, other_eos)
    with pytest.raises(PolyplanError, match=r"^chain member 2 \('.*missing'\): no such model folder"):
        _load_folders(target, target, tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PolyplanError, match=r"^chain member 1 \('.*empty'\): cannot load"):
        _load_folders(target, tmp_path / "empty")
    assert [member.name for member in _load_folders(target, target)] == ["target", "target#2"]


def test_tokenizer_larger_than_the_model():
    with pytest.raises(PolyplanError, match=r"^chain member 'tiny': its tokenizer has 64 tokens but the model only 32 logits"):
        HFMember(tiny_llama(0, layers=1, vocab=32), name="tiny", tokenizer=tiny_tokenizer())
