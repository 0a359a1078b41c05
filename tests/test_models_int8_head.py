"""`quantize: int8-head`: the LM head in dynamic int8 with its top logits recomputed exactly.

Agreement is deterministic (no sampling), so the thresholds below are exact checks on fixed
seeds, not statistical tests. The negative control is the plain int8 head (no rescoring),
which must agree less on the same positions.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from conftest import save_model, tiny_llama, tiny_tokenizer
from polyplan.formats.candidates import parse_candidates, supported_quantization
from polyplan.models.loader import load_candidates
from polyplan.decoder.chain import generate
from polyplan.models.derive import quantize_model
from polyplan.decoder.hf import HFMember
from polyplan.models.int8_head import RescoredInt8Head, int8_head_model
from polyplan.formats.errors import PolyplanError

pytestmark = pytest.mark.usefixtures("single_thread")

VOCAB = 2048  # large enough that near-ties among the top logits occur, as in a real vocabulary


@pytest.fixture(scope="module")
def model(single_thread):
    return tiny_llama(0, layers=2, hidden=32, vocab=VOCAB, init=0.2)


@pytest.fixture(scope="module")
def sequences():
    generator = torch.Generator().manual_seed(4)
    return torch.randint(0, VOCAB, (16, 48), generator=generator)  # 768 positions


def argmaxes(model, sequences):
    with torch.inference_mode():
        return model(sequences).logits.argmax(-1)


def test_the_rescored_logits_are_exact_and_the_others_int8(model):
    head = model.get_output_embeddings()
    rescored = RescoredInt8Head(head, top=8)
    hidden = torch.randn(5, head.in_features, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        exact, approximate, mixed = head(hidden), rescored.int8(hidden), rescored(hidden)
    top = approximate.topk(8, dim=-1).indices
    torch.testing.assert_close(mixed.gather(-1, top), exact.gather(-1, top), rtol=1e-5, atol=1e-5)
    untouched = torch.ones_like(mixed, dtype=torch.bool).scatter(-1, top, False)
    assert torch.equal(mixed[untouched], approximate[untouched])
    assert rescored.weight is head.weight  # shared, not copied


def test_agreement_with_the_float_model_is_high_and_beats_the_plain_int8_head(model, sequences):
    reference = argmaxes(model, sequences)
    rescored = (argmaxes(int8_head_model(model, top=16), sequences) == reference).float().mean().item()
    plain = int8_head_model(model, top=1)  # top 1 "rescored" keeps the int8 argmax: the negative control
    plain_agreement = (argmaxes(plain, sequences) == reference).float().mean().item()
    everything = (argmaxes(quantize_model(model, "int8"), sequences) == reference).float().mean().item()
    assert rescored >= 0.99
    assert plain_agreement < rescored and everything < rescored


def test_the_copy_shares_the_body_and_leaves_the_base_untouched(model):
    copy = int8_head_model(model)
    assert isinstance(copy.get_output_embeddings(), RescoredInt8Head)
    assert isinstance(model.get_output_embeddings(), nn.Linear)
    assert copy.model is model.model  # decoder layers and embeddings are shared


def test_greedy_chain_with_the_int8_head_copy_equals_the_target(model):
    prompt = [5, 17, 300, 41]
    target_only = generate([HFMember(model)], prompt, max_new_tokens=24).token_ids
    chained = generate([HFMember(model, name="t"), HFMember(int8_head_model(model), name="q")], prompt,
                       max_new_tokens=24, block_sizes=[4])
    assert chained.token_ids == target_only
    assert chained.levels[0].tokens_accepted >= 0.9 * chained.levels[0].tokens_drafted


def test_loads_through_models_yaml(tmp_path):
    save_model(tmp_path / "target", tiny_llama(0, layers=2, hidden=32), tiny_tokenizer())
    candidates = parse_candidates(
        {"candidates": [
            {"name": "target", "source": "./target", "target": True},
            {"name": "target-head8", "derive": {"from": "target", "quantize": "int8-head"}},
        ]},
        origin=str(tmp_path / "models.yaml"), base_dir=tmp_path,
    )
    loaded = load_candidates(candidates)
    row = next(item for item in loaded.candidates if item.candidate.name == "target-head8")
    assert row.dtype == "int8-head (dynamic)"
    assert isinstance(loaded.member("target-head8").model.get_output_embeddings(), RescoredInt8Head)


def test_refused_on_cuda_with_one_line(tmp_path):
    assert supported_quantization("int8-head", "cuda") == "dynamic int8 quantization has CPU kernels only"
    assert supported_quantization("int8-head", "cpu") is None
    (tmp_path / "target").mkdir()
    with pytest.raises(PolyplanError, match=r"candidate 'q': quantize int8-head on cuda: dynamic int8 quantization has CPU kernels only"):
        parse_candidates(
            {"candidates": [
                {"name": "target", "source": "./target", "target": True},
                {"name": "q", "derive": {"from": "target", "quantize": "int8-head"}, "device": "cuda"},
            ]},
            origin=str(tmp_path / "models.yaml"), base_dir=tmp_path,
        )


def test_the_agreement_script_runs_end_to_end(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    save_model(tmp_path / "tiny", tiny_llama(0, layers=2, hidden=32), tiny_tokenizer())
    script = Path(__file__).resolve().parents[1] / "examples" / "int8_agreement.py"
    spec = importlib.util.spec_from_file_location("int8_agreement", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main([str(tmp_path / "tiny"), "--count", "2", "--new-tokens", "3"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "2 prompts x 3 target tokens = 6 positions"
    assert len(lines) == 14 and lines[-1].endswith("(quantize: int8-head)")
