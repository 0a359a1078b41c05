"""`derive: {quantize: bf16 | int8, head: int8}`: a cheaper copy of the whole target whose LM head
is int8-head's (dynamic int8, top logits recomputed exactly from the ORIGINAL float32 head).

On gemma-3-270m this is the faithful quantized intermediate (docs/models-yaml.md): bf16
layers + the int8 head cost 29 ms a step against the target's 73 ms and agree on 0.99 of its
greedy tokens. These tests check the construction (what is shared, what is copied, what is left
untouched), the per-channel int8 weights, the one-line refusal on a CPU without native bf16,
and that a chain through such a copy stays lossless.
"""

from __future__ import annotations

import pytest
import torch

from conftest import save_model, tiny_llama, tiny_tokenizer
from polyplan.models import derive
from polyplan.models.loader import load_candidates
from polyplan.decoder.chain import generate
from polyplan.models.derive import quantize_model
from polyplan.decoder.hf import HFMember
from polyplan.models.int8_head import RescoredInt8Head
from polyplan.formats.candidates import parse_candidates
from polyplan.formats.errors import PolyplanError

pytestmark = pytest.mark.usefixtures("single_thread")

VOCAB = 2048


@pytest.fixture(scope="module")
def model(single_thread):
    return tiny_llama(0, layers=2, hidden=32, vocab=VOCAB, init=0.2)


@pytest.fixture(scope="module")
def sequences():
    return torch.randint(0, VOCAB, (16, 48), generator=torch.Generator().manual_seed(4))


def _agreement(copy, model, sequences) -> float:
    with torch.inference_mode():
        return (copy(sequences).logits.argmax(-1) == model(sequences).logits.argmax(-1)).float().mean().item()


def _state(model) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


@pytest.mark.skipif(not derive.cpu_has_fast_bf16(), reason="this CPU has no native bf16 matmul")
def test_bf16_copy_with_the_int8_head_keeps_the_argmax_and_the_base(model, sequences):
    before = _state(model)
    copy = quantize_model(model, "bf16", head="int8")
    head = copy.get_output_embeddings()
    assert isinstance(head, RescoredInt8Head)
    assert head.exact_weight is model.get_output_embeddings().weight  # exact logits from the float32 head
    assert copy.model.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16
    with torch.inference_mode():
        logits = copy(sequences[:2]).logits
    assert logits.dtype == torch.float32
    assert _agreement(copy, model, sequences) >= 0.97
    after = model.state_dict()
    assert all(after[name].dtype == torch.float32 and torch.equal(after[name], value) for name, value in before.items())


def test_int8_copy_with_the_int8_head_shares_the_float_head_and_quantizes_per_channel(model, sequences):
    before = _state(model)
    copy = quantize_model(model, "int8", head="int8")
    head = copy.get_output_embeddings()
    assert isinstance(head, RescoredInt8Head) and head.exact_weight is model.get_output_embeddings().weight
    up = copy.model.layers[0].mlp.up_proj
    assert up.weight().qscheme() == torch.per_channel_affine  # one scale per output channel
    assert model.model.layers[0].mlp.up_proj is not up  # the layers are copies; the base keeps float32 ones
    assert _agreement(copy, model, sequences) >= 0.7  # a random tiny model: its int8 layers lose more than gemma's
    assert all(torch.equal(model.state_dict()[name], value) for name, value in before.items())


def test_bf16_on_a_cpu_without_native_bf16_is_one_line(model, monkeypatch):
    monkeypatch.setattr(derive, "cpu_has_fast_bf16", lambda: False)
    with pytest.raises(PolyplanError, match=r"^quantize: bf16 on cpu: this CPU has no native bf16 matmul \(AVX512-BF16 or AMX\)"):
        quantize_model(model, "bf16", head="int8")


@pytest.mark.parametrize("kind", ["int8", pytest.param("bf16", marks=pytest.mark.skipif(
    not derive.cpu_has_fast_bf16(), reason="this CPU has no native bf16 matmul"))])
def test_greedy_chain_through_the_copy_equals_the_target(model, kind):
    prompt = [5, 17, 300, 41]
    target_only = generate([HFMember(model)], prompt, max_new_tokens=24).token_ids
    members = [HFMember(model, name="t"), HFMember(quantize_model(model, kind, head="int8"), name="q")]
    chained = generate(members, prompt, max_new_tokens=24, block_sizes=[4])
    assert chained.token_ids == target_only
    assert chained.levels[0].tokens_accepted > 0


def test_loads_through_models_yaml_with_its_label(tmp_path):
    save_model(tmp_path / "target", tiny_llama(0, layers=2, hidden=32), tiny_tokenizer())
    candidates = parse_candidates(
        {"candidates": [
            {"name": "target", "source": "./target", "target": True},
            {"name": "target-q8", "derive": {"from": "target", "quantize": "int8", "head": "int8"}},
        ]},
        origin=str(tmp_path / "models.yaml"), base_dir=tmp_path,
    )
    assert candidates.by_name("target-q8").derive.head == "int8"
    loaded = load_candidates(candidates)
    row = next(item for item in loaded.candidates if item.candidate.name == "target-q8")
    assert row.dtype == "int8 (dynamic), int8 head (dynamic)"
    assert isinstance(loaded.member("target-q8").model.get_output_embeddings(), RescoredInt8Head)


def test_a_hook_on_the_base_does_not_count_the_shallow_copys_passes(model):
    """bench peers and the HF overhead count the target's passes with a forward hook; an
    int8-head or early-exit copy shares the target's modules, so without its own hook tables
    its passes were counted as the target's (tokens per target pass below 1)."""
    from polyplan.models.derive import early_exit_model

    copies = [quantize_model(model, "int8-head"), early_exit_model(model, 1)]
    calls = []
    handle = model.register_forward_hook(lambda *args: calls.append(1))
    try:
        with torch.inference_mode():
            for copy in copies:
                copy(torch.tensor([[1, 2, 3]]))
            assert calls == []
            model(torch.tensor([[1, 2, 3]]))
    finally:
        handle.remove()
    assert calls == [1]
