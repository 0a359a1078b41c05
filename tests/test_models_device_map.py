"""`device_map: auto` in models.yaml: a tiny target split by accelerate between the CPU and
disk offload (max_memory below its size) decodes greedily exactly as the unsplit model, also
as the base of an early-exit drafter; combinations that cannot work are one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import save_model, tiny_llama, tiny_tokenizer
from polyplan.formats.candidates import parse_candidates
from polyplan.models.loader import load_candidates
from polyplan.decoder.chain import generate
from polyplan.models.reduced_vocab import restrict_head
from polyplan.formats.errors import PolyplanError
from polyplan.models.fingerprints import candidate_fingerprints

pytestmark = pytest.mark.usefixtures("single_thread")


def _yaml(extra: dict) -> dict:
    return {"candidates": [{"name": "target", "source": "./target", "target": True, **extra},
                           {"name": "exit1", "derive": {"from": "target", "layers": 1}}]}


def test_a_model_split_over_cpu_and_disk_decodes_as_the_unsplit_one(tmp_path):
    model = tiny_llama(0, layers=4, hidden=64)
    save_model(tmp_path / "target", model, tiny_tokenizer())
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    split = parse_candidates(
        _yaml({"device_map": "auto", "max_memory": {"cpu": size // 2}, "offload_folder": "./offload"}), base_dir=tmp_path
    )
    whole = parse_candidates(_yaml({}), base_dir=tmp_path)
    assert split.target.offload_folder == str(tmp_path / "offload")
    loaded_split, loaded_whole = load_candidates(split), load_candidates(whole)
    placement = loaded_split.member("target").model.hf_device_map
    assert "disk" in placement.values() and "cpu" in placement.values()  # really split
    prompt = [5, 6, 7, 8, 9]
    for chain, blocks in ((["target"], []), (["target", "exit1"], [3])):
        ours = generate(loaded_split.chain(chain), prompt, max_new_tokens=12, block_sizes=blocks)
        reference = generate(loaded_whole.chain(["target"]), prompt, max_new_tokens=12)
        assert ours.token_ids == reference.token_ids
    # negative control: the check can fail (an early-exit copy alone decodes differently)
    assert generate(loaded_split.chain(["exit1"]), prompt, max_new_tokens=12).token_ids != reference.token_ids
    prints_split, prints_whole = candidate_fingerprints(split), candidate_fingerprints(whole)
    assert prints_split["target"] != prints_whole["target"]  # a split model is profiled apart


def test_a_reduced_head_on_a_split_model_is_the_one_that_runs(tmp_path):
    # regression: a shallow copy of a device_map model kept accelerate's forward bound to the
    # original, so the copy's new head was never called (the head stays on the CPU here: its
    # rows are read when the reduced head is built)
    from transformers import AutoModelForCausalLM

    save_model(tmp_path / "target", tiny_llama(0, layers=2), tiny_tokenizer())
    placement = {"model.embed_tokens": "cpu", "model.layers": "disk", "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
    target = AutoModelForCausalLM.from_pretrained(tmp_path / "target", device_map=placement, offload_folder=str(tmp_path / "offload"))
    assert "_hf_hook" in target.__dict__  # really dispatched by accelerate
    keep = torch.tensor([1, 5, 9])
    prompt = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        logits = restrict_head(target, keep)(prompt).logits[0, -1]
        original = target(prompt).logits[0, -1]
    outside = torch.ones_like(logits, dtype=torch.bool)
    outside[keep] = False
    assert torch.isinf(logits[outside]).all() and torch.allclose(logits[keep], original[keep])
    assert torch.isfinite(original).all()  # the original keeps its full head


@pytest.mark.parametrize(
    ("entry", "derived", "message"),
    [
        ({"device_map": "balanced"}, None, "device_map 'balanced' is not supported"),
        ({"device_map": "auto", "device": "cpu"}, None, "give 'device' or 'device_map: auto', not both"),
        ({"max_memory": {"cpu": 10}}, None, "'max_memory' needs 'device_map: auto'"),
        ({"device_map": "auto"}, {"from": "target", "quantize": "int8"}, "cannot quantize 'target', which uses device_map"),
    ],
)
def test_combinations_that_cannot_work_are_one_clear_error(tmp_path, entry, derived, message):
    (tmp_path / "target").mkdir()
    data = _yaml(entry)
    if derived is not None:
        data["candidates"].append({"name": "q", "derive": derived})
    with pytest.raises(PolyplanError, match=message):
        parse_candidates(data, base_dir=tmp_path)
    derived_with_map = {"candidates": [{"name": "target", "source": "./target", "target": True},
                                       {"name": "e", "derive": {"from": "target", "layers": 1}, "device_map": "auto"}]}
    with pytest.raises(PolyplanError, match="'device_map' belongs to source entries"):
        parse_candidates(derived_with_map, base_dir=tmp_path)
