"""`derive: {from: <llama.cpp entry>, layers: L}`: a GGUF cut to its first L blocks (`models.gguf_prune`).

What is checked, on tiny GGUFs the tests write (4 blocks): the copy keeps blocks 0..L-1 and the
tensors outside the blocks byte for byte at their own type (a q8_0 file stays q8_0), says
`block_count = L` and cuts per-layer arrays to L (llama.cpp refuses the copy when they are
left whole: the negative control); llama.cpp loads it and its logits are the torch model's with
its layer list cut to L (`early_exit_model`), and differ from the whole model's; L = depth gives
the base's logits bit for bit; derivations chain both ways through models.yaml (prune then
quantize equals quantize then prune for q8_0, which quantizes each tensor on its own); L out of
range and a file without blocks are one line (exit 2 through the CLI); the copy is cached by
content; the fingerprint and the engine export follow L.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from polyplan.cli.app import app
from polyplan.formats.candidates import parse_candidates
from polyplan.formats.errors import PolyplanError
from polyplan.models import gguf_prune
from polyplan.models.derive import early_exit_model
from polyplan.models.loader import load_candidates
from tiny_gguf import write_tiny_gguf

pytest.importorskip("llama_cpp")
from polyplan.decoder.llama_cpp import LlamaCppMember  # noqa: E402 - after the skip

pytestmark = pytest.mark.usefixtures("single_thread")

DEPTH = 4
SEQUENCE = torch.tensor([5, 9, 33, 70, 101, 7, 8, 9])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 4-block GGUF and the float32 torch model it holds."""
    folder = tmp_path_factory.mktemp("gguf_prune")
    model = write_tiny_gguf(folder / "tiny.gguf", layers=DEPTH)
    return folder / "tiny.gguf", model


@pytest.fixture(scope="module")
def arrays(tmp_path_factory):
    """The same model with its head counts as per-layer arrays (llama.cpp reads them; transformers
    does not, so it serves the file-level tests, not models.yaml's)."""
    folder = tmp_path_factory.mktemp("gguf_prune_arrays")
    write_tiny_gguf(folder / "arrays.gguf", layers=DEPTH, per_layer_heads=True)
    return folder / "arrays.gguf"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYPLAN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def logits(path: Path) -> torch.Tensor:
    """The file's logits for every position of SEQUENCE, one llama.cpp decode."""
    member = LlamaCppMember(path, context=64, threads=1)
    try:
        return member.forward(SEQUENCE)
    finally:
        member.close()


def read(path: Path):
    import gguf

    reader = gguf.GGUFReader(path, "r")
    return reader, {tensor.name: tensor for tensor in reader.tensors}


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_the_copy_runs_the_first_blocks_on_llama_cpp(tiny, cache, layers):
    path, model = tiny
    rows = logits(gguf_prune.pruned_copy(path, layers))
    with torch.no_grad():
        expected = early_exit_model(model, layers)(SEQUENCE.unsqueeze(0)).logits[0]
        whole = model(SEQUENCE.unsqueeze(0)).logits[0]
    assert torch.allclose(rows, expected, atol=2e-2), (rows - expected).abs().max()
    assert not torch.allclose(rows, whole, atol=0.5)  # the test can fail: the dropped blocks matter


def test_the_copy_keeps_the_first_blocks_byte_for_byte_and_cuts_per_layer_arrays(arrays, cache):
    path = arrays
    copy = gguf_prune.pruned_copy(path, 2)
    assert copy.parent == cache / "llama.cpp" and copy.name.endswith("-layers2.gguf")
    base, base_tensors = read(path)
    pruned, tensors = read(copy)
    assert sorted(tensors) == sorted(name for name in base_tensors if not name.startswith(("blk.2.", "blk.3.")))
    assert {"token_embd.weight", "output_norm.weight", "output.weight", "blk.1.ffn_down.weight"} <= set(tensors)
    for name, tensor in tensors.items():
        assert tensor.tensor_type == base_tensors[name].tensor_type
        assert tensor.data.tobytes() == base_tensors[name].data.tobytes(), name
    assert pruned.get_field("llama.block_count").contents() == 2 and gguf_prune.block_count(copy) == 2
    assert pruned.get_field("llama.attention.head_count").contents() == [4, 4]
    assert pruned.get_field("llama.attention.head_count_kv").contents() == [2, 2]
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.chat_template", "llama.context_length"):
        assert pruned.get_field(key).contents() == base.get_field(key).contents(), key
    assert not gguf_prune._per_layer("llama.rope.dimension_sections", "llama", [8, 8, 0, 0], DEPTH)


def test_negative_control_per_layer_arrays_left_whole_are_refused_by_llama_cpp(tiny, arrays, cache, monkeypatch):
    path, _ = tiny
    cut = logits(gguf_prune.pruned_copy(arrays, 2))
    assert torch.equal(cut, logits(gguf_prune.pruned_copy(path, 2)))  # the same model either way
    monkeypatch.setattr(gguf_prune, "_per_layer", lambda *args: False)
    with pytest.raises(PolyplanError, match="llama.cpp cannot load"):
        logits(gguf_prune.pruned_copy(arrays, 3))  # another L: a copy made while the patch holds


def test_all_blocks_give_the_bases_logits(tiny, cache):
    path, _ = tiny
    assert torch.equal(logits(gguf_prune.pruned_copy(path, DEPTH)), logits(path))


def test_the_copy_is_made_once_by_content(tiny, cache, monkeypatch):
    path, _ = tiny
    first = gguf_prune.pruned_copy(path, 2)
    stamp = first.stat().st_mtime_ns
    writes = []
    monkeypatch.setattr(gguf_prune, "write_pruned", lambda base, out, layers: (writes.append(layers), Path(out).touch()))
    assert gguf_prune.pruned_copy(path, 2) == first and first.stat().st_mtime_ns == stamp
    assert writes == []
    gguf_prune.pruned_copy(path, 3)  # another L is another file: the writer is called (it can fail)
    assert writes == [3]
    assert not list(first.parent.glob(".*partial*"))


def entries(path: Path, *more):
    return {"candidates": [{"name": "tiny", "source": str(path), "engine": "llama.cpp", "target": True}, *more]}


def test_derivations_chain_through_models_yaml(tiny, cache, tmp_path):
    path, _ = tiny
    candidates = parse_candidates(entries(
        path,
        {"name": "exit2", "derive": {"from": "tiny", "layers": 2}},
        {"name": "exit2-q8", "derive": {"from": "exit2", "quantize": "q8_0"}},
        {"name": "q8", "derive": {"from": "tiny", "quantize": "q8_0"}},
        {"name": "q8-exit2", "derive": {"from": "q8", "layers": 2}},
    ), base_dir=tmp_path, origin="m.yaml")
    loaded = load_candidates(candidates)
    assert loaded.compatible, loaded.compatibility
    rows = {item.candidate.name: item for item in loaded.candidates}
    assert rows["exit2"].dtype.endswith("(first 2 of 4 blocks)")
    assert rows["exit2-q8"].dtype.endswith("(first 2 of 4 blocks, then requantized by llama.cpp to q8_0)")
    assert rows["q8-exit2"].dtype.endswith("(requantized by llama.cpp to q8_0, then first 2 of 4 blocks)")
    assert rows["exit2"].parameters < rows["tiny"].parameters
    pruned_quantized = loaded.member("q8-exit2").path
    _, tensors = read(pruned_quantized)
    assert tensors["blk.0.ffn_up.weight"].tensor_type.name == "Q8_0"  # not dequantized
    assert torch.equal(logits(loaded.member("exit2-q8").path), logits(pruned_quantized))
    assert not torch.equal(logits(loaded.member("q8").path), logits(pruned_quantized))

    from polyplan.engines.export import engine_files

    from polyplan.planner.engine_export import loadable

    files = engine_files(candidates)
    assert files["exit2"] == str(loaded.member("exit2").path) and files["q8-exit2"] == str(pruned_quantized)
    assert loadable("llama.cpp", candidates.by_name("exit2"), files["exit2"]) == ("draft_model", files["exit2"], None)
    assert "2-block copy of 'tiny' is not made yet" in loadable("llama.cpp", candidates.by_name("exit2"))[2]


def test_the_fingerprint_follows_the_layers(tiny, tmp_path):
    from polyplan.models.fingerprints import candidate_fingerprints

    path, _ = tiny
    prints = [candidate_fingerprints(parse_candidates(entries(path, {"name": "exit", "derive": {"from": "tiny", "layers": layers}}),
                                                      base_dir=tmp_path))["exit"] for layers in (2, 3)]
    assert prints[0] != prints[1]


@pytest.mark.parametrize("layers", [DEPTH + 1, 100])
def test_layers_beyond_the_depth_is_one_line_naming_the_entry_and_the_depth(tiny, cache, tmp_path, layers):
    path, _ = tiny
    candidates = parse_candidates(entries(path, {"name": "deep", "derive": {"from": "tiny", "layers": layers}}), base_dir=tmp_path, origin="m.yaml")
    with pytest.raises(PolyplanError) as error:
        load_candidates(candidates)
    assert str(error.value) == f"m.yaml: candidate 'deep': layers {layers} is outside 1..4: 'tiny' has 4 transformer blocks"
    assert not (cache / "llama.cpp").exists() or not list((cache / "llama.cpp").iterdir())
    with pytest.raises(PolyplanError, match=r"^layers 0: outside 1\.\.4 \(tiny.gguf has 4 transformer blocks\)$"):
        gguf_prune.pruned_copy(path, 0)


def one_line_exit_2(result, *fragments):
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output, result.output
    for fragment in fragments:
        assert fragment in result.output, result.output


def write_yaml(tmp_path: Path, data) -> Path:
    import yaml

    file = tmp_path / "models.yaml"
    file.write_text(yaml.safe_dump(data), encoding="utf-8")
    return file


def test_bad_layers_through_the_cli_is_one_line_exit_2(tiny, cache, tmp_path):
    path, _ = tiny
    runner = CliRunner()
    deep = write_yaml(tmp_path, entries(path, {"name": "deep", "derive": {"from": "tiny", "layers": 9}}))
    one_line_exit_2(runner.invoke(app, ["models", "check", "--candidates", str(deep)]), "candidate 'deep'", "'tiny' has 4 transformer blocks")
    zero = write_yaml(tmp_path, entries(path, {"name": "zero", "derive": {"from": "tiny", "layers": 0}}))
    one_line_exit_2(runner.invoke(app, ["models", "check", "--candidates", str(zero)]), "candidate 'zero'", "layers must be an integer >= 1")
    flat = tmp_path / "flat.gguf"
    write_tiny_gguf(flat, layers=0)  # (llama.cpp itself aborts on loading it, so it comes after its copy)
    blockless = write_yaml(tmp_path, entries(path, {"name": "exit1", "derive": {"from": "flat", "layers": 1}},
                                             {"name": "flat", "source": str(flat), "engine": "llama.cpp"}))
    one_line_exit_2(runner.invoke(app, ["models", "check", "--candidates", str(blockless)]),
                    "candidate 'exit1'", "flat.gguf: no transformer blocks to keep (llama.block_count is 0)")
    with pytest.raises(PolyplanError, match=r"^flat.gguf: no transformer blocks to keep \(llama.block_count is 0\)$"):
        gguf_prune.pruned_copy(flat, 1)
    check = runner.invoke(app, ["models", "check", "--candidates", str(write_yaml(tmp_path, entries(
        path, {"name": "exit2", "derive": {"from": "tiny", "layers": 2}})))])
    assert check.exit_code == 0 and "first 2 of 4 blocks" in check.output, check.output
