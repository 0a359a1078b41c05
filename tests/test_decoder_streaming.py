"""Streaming: `generate(on_tokens=...)` hands out exactly the output tokens as they are committed,
and `IncrementalText` turns them into text without splitting a multi-byte character; plus the
one vocabulary check (`decoder.compatibility`), run once, by the loader."""

from __future__ import annotations

import pytest
import torch

from conftest import save_model, tiny_llama, tiny_tokenizer
from table_member import TableMember
from polyplan.decoder.chain import generate
from polyplan.decoder.hf import HFMember
from polyplan.decoder.sampling import Sampling
from polyplan.decoder.text import IncrementalText, generate_text
from polyplan.formats.errors import PolyplanError

pytestmark = pytest.mark.usefixtures("single_thread")

VOCAB = 8


def _tables(n: int) -> list[TableMember]:
    return [TableMember.random(VOCAB, 2, torch.Generator().manual_seed(i), name=f"m{i}") for i in range(n)]


@pytest.mark.parametrize("n, blocks", [(1, ()), (2, (3,)), (3, (2, 3)), (4, (3, 1, 2))])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("eos", [None, 5])
def test_streamed_tokens_are_the_output_in_order(n, blocks, temperature, eos):
    for seed in range(6):
        pieces: list[tuple[int, ...]] = []
        result = generate(
            _tables(n), [3, 1], max_new_tokens=11, block_sizes=blocks, sampling=Sampling(temperature=temperature),
            generator=torch.Generator().manual_seed(seed), eos_token_id=eos, on_tokens=pieces.append,
        )
        assert all(piece for piece in pieces)
        assert tuple(token for piece in pieces for token in piece) == result.token_ids
        if n > 1 and not result.stopped_at_eos:
            assert len(pieces) == result.levels[0].verifications  # one piece per top-level round


def test_streaming_does_not_change_the_output():
    plain = generate(_tables(3), [3, 1], max_new_tokens=20, block_sizes=(2, 2), sampling=Sampling(temperature=1.0),
                     generator=torch.Generator().manual_seed(1))
    streamed = generate(_tables(3), [3, 1], max_new_tokens=20, block_sizes=(2, 2), sampling=Sampling(temperature=1.0),
                        generator=torch.Generator().manual_seed(1), on_tokens=lambda ids: None)
    assert streamed.token_ids == plain.token_ids


def test_incremental_text_never_splits_a_multibyte_character():
    from transformers import AutoTokenizer

    from polyplan.models.builtin import builtin_folder

    tokenizer = AutoTokenizer.from_pretrained(builtin_folder("target"), local_files_only=True)
    text = "naïve café → ✓ 日本語 def f(): return 'é'"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    stream = IncrementalText(tokenizer)
    pieces = [stream.add([token]) for token in ids]
    pieces.append(stream.finish())
    assert "".join(pieces) == tokenizer.decode(ids) == text
    assert not any("\ufffd" in piece for piece in pieces)
    assert "" in pieces[:-1]  # a token that ended inside a character was held back


def test_generate_text_streams_pieces_that_join_to_the_text():
    tokenizer = tiny_tokenizer()
    target = tiny_llama(0, layers=2, init=0.1)
    members = [HFMember(target, name="target", tokenizer=tokenizer), HFMember(tiny_llama(1, layers=1), name="d", tokenizer=tokenizer)]
    pieces: list[str] = []
    run = generate_text(members, tokenizer, "w5 w17 w33", block_sizes=[2], max_new_tokens=12, on_text=pieces.append)
    assert len(pieces) > 1 and "".join(pieces) == run.text
    quiet = generate_text(members, tokenizer, "w5 w17 w33", block_sizes=[2], max_new_tokens=12)
    assert quiet.result.token_ids == run.result.token_ids


def test_the_vocabulary_check_runs_once_in_the_loader(tmp_path, monkeypatch):
    """The loader refuses a drafter of another vocabulary, naming the chain position of a
    folder and the entry of a models.yaml, with the same reason; it runs the check once per
    loaded member, and `generate` and the profiler do not run it again."""
    import polyplan.models.loader as loader
    from polyplan.models.chain_candidates import ChainCandidates
    from polyplan.models.loader import load_candidates
    from polyplan.formats.candidates import read_candidates
    from polyplan.profiler import ProfiledModel
    from polyplan.profiler.checks import check_models

    model = tiny_llama(0, layers=1)
    reason = "tokenizer differs from the target 'target': token 'w4' has id 4 there but 9 here"
    folders = [save_model(tmp_path / "target", model, tiny_tokenizer()), save_model(tmp_path / "odd", model, tiny_tokenizer(swap=(4, 9)))]
    with pytest.raises(PolyplanError) as through_folders:
        ChainCandidates.from_names(None, [str(folder) for folder in folders]).load()
    yaml_file = tmp_path / "models.yaml"
    yaml_file.write_text("candidates:\n  - {name: target, source: ./target, target: true}\n  - {name: odd, source: ./odd}\n")
    with pytest.raises(PolyplanError) as through_yaml:
        load_candidates(read_candidates(yaml_file))
    assert str(through_folders.value) == f"chain member 1 ('odd'): {reason}"
    assert str(through_yaml.value) == f"{yaml_file}: candidate 'odd': {reason}"

    calls = []
    checked = loader.incompatibility
    monkeypatch.setattr(loader, "incompatibility", lambda *args: calls.append(args[0].name) or checked(*args))
    twin = save_model(tmp_path / "twin", model, tiny_tokenizer())
    loaded = ChainCandidates.from_names(None, [str(folders[0]), str(twin)], block_sizes=(2,)).load()
    assert calls == ["target", "twin"]  # once per loaded member, at load time
    generate(list(loaded.members), [5, 6], max_new_tokens=4, block_sizes=(2,))
    check_models([ProfiledModel(member.name, member, "f") for member in loaded.members])
    assert calls == ["target", "twin"]  # not again
    odd = HFMember(model, name="odd", tokenizer=tiny_tokenizer(swap=(4, 9)))
    target = HFMember(model, name="target", tokenizer=tiny_tokenizer())
    assert generate([target, odd], [5, 6], max_new_tokens=2, block_sizes=(2,)).token_ids  # members are taken as handed
