"""Model sources beyond a local folder: a .gguf file (dequantized once into the cache) and a hub
id resolved from the local Hugging Face cache only; and the one-line errors of bad ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from conftest import save_model, tiny_llama, tiny_tokenizer
from polyplan.formats.candidates import parse_candidates
from polyplan.cli.app import app
from polyplan.models import gguf_source
from polyplan.models.loader import load_candidates
from polyplan.decoder.member import stop_token_ids
from polyplan.formats.errors import PolyplanError
from tiny_gguf import write_tiny_gguf


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory):
    """A tiny Llama GGUF (with a chat template and an end-of-turn token) and the model it holds."""
    folder = tmp_path_factory.mktemp("gguf")
    model = write_tiny_gguf(folder / "tiny.gguf")
    return folder / "tiny.gguf", model


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYPLAN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def load(entries, base: Path):
    return load_candidates(parse_candidates({"candidates": entries}, base_dir=base, origin="m.yaml"))


def test_gguf_source_loads_the_model_and_a_second_load_hits_the_cache(tiny_file, cache, monkeypatch, single_thread):
    path, original = tiny_file
    entries = [{"name": "target", "source": path.name, "target": True}, {"name": "exit1", "derive": {"from": "target", "layers": 1}}]
    loaded = load(entries, path.parent)
    folder = gguf_source.cached_folder(gguf_source.file_sha256(path))
    assert folder.parent == cache / "gguf" and (folder / gguf_source.SOURCE_RECORD).is_file()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no partial folder left behind
    target = loaded.member("target")
    ids = torch.tensor(loaded.tokenizer("def add(a, b):\n    return a + b")["input_ids"])
    with torch.no_grad():
        expected = original(ids.unsqueeze(0)).logits[0, -1]
    assert torch.allclose(target.forward(ids, keep_last=1)[0], expected, atol=1e-5)  # q/k permutation undone
    assert loaded.tokenizer.chat_template and "<|user|>" in loaded.tokenizer.chat_template
    end_of_turn = loaded.tokenizer.convert_tokens_to_ids("<|end|>")
    assert set(stop_token_ids(target)) == {0, end_of_turn}  # <|endoftext|> and the GGUF's end-of-turn id

    def no_second_conversion(*args, **kwargs):
        raise AssertionError("the cached folder should have been reused")

    monkeypatch.setattr(gguf_source, "_convert", no_second_conversion)
    again = load(entries[:1], path.parent)
    assert torch.equal(again.member("target").model.lm_head.weight, target.model.lm_head.weight)


def test_interrupted_conversion_leaves_no_folder(tiny_file, cache, monkeypatch):
    path, _ = tiny_file

    def crash(model, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("transformers.PreTrainedModel.save_pretrained", crash)
    with pytest.raises(KeyboardInterrupt):
        gguf_source.hf_folder_for_gguf(path)
    assert list((cache / "gguf").iterdir()) == []


def test_truncated_gguf_is_one_clear_line(tiny_file, tmp_path, cache):
    path, _ = tiny_file
    data = path.read_bytes()
    for size in (100, len(data) // 2, len(data) - 1000):
        cut = tmp_path / f"cut{size}.gguf"
        cut.write_bytes(data[:size])
        with pytest.raises(PolyplanError, match=r"^m.yaml: candidate 'target': .*cut\d+\.gguf: truncated or corrupt GGUF file") as raised:
            load([{"name": "target", "source": cut.name, "target": True}], tmp_path)
        assert "\n" not in str(raised.value)
    (tmp_path / "text.gguf").write_text("not a model")
    with pytest.raises(PolyplanError, match=r"text\.gguf: not a GGUF file"):
        load([{"name": "target", "source": "text.gguf", "target": True}], tmp_path)


def test_gguf_of_an_architecture_transformers_cannot_load(tmp_path, cache):
    write_tiny_gguf(tmp_path / "odd.gguf", architecture="rwkv7")
    with pytest.raises(PolyplanError, match=r"odd\.gguf: GGUF architecture 'rwkv7' cannot be loaded by transformers \(it reads: .*llama"):
        load([{"name": "target", "source": "odd.gguf", "target": True}], tmp_path)
    assert not (cache / "gguf").exists() or list((cache / "gguf").iterdir()) == []


def test_missing_gguf_file_is_a_schema_error(tmp_path):
    with pytest.raises(PolyplanError, match=r"^m.yaml: candidate 'target': GGUF file 'gone.gguf' not found"):
        parse_candidates({"candidates": [{"name": "target", "source": "gone.gguf", "target": True}]}, base_dir=tmp_path, origin="m.yaml")


def _fake_hub_cache(home: Path, repo_id: str) -> Path:
    """A Hugging Face cache holding `repo_id` as `hf download` leaves it (refs/main → snapshot)."""
    repo = home / "hub" / f"models--{repo_id.replace('/', '--')}"
    revision = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    return save_model(repo / "snapshots" / revision, tiny_llama(0, layers=1), tiny_tokenizer())


def test_hub_id_loads_from_the_local_cache_only(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # no network either way: the cache alone must do
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    snapshot = _fake_hub_cache(tmp_path / "hf", "some-org/tiny")
    loaded = load([{"name": "target", "source": "some-org/tiny", "target": True}], tmp_path)
    assert loaded.member("target").vocab_size == 64
    assert Path(loaded.member("target").model.name_or_path) == snapshot
    with pytest.raises(PolyplanError, match=r"^m.yaml: candidate 'remote': hub id 'some-org/other' is not in the local cache .*hf download some-org/other"):
        load([{"name": "remote", "source": "some-org/other", "target": True}], tmp_path)


def test_generate_cli_takes_a_gguf_and_fails_cleanly_on_a_bad_one(tiny_file, tmp_path, cache, single_thread):
    path, _ = tiny_file
    ok = CliRunner().invoke(app, ["generate", "def f(x):", "--chain", str(path), "--max-new-tokens", "4", "--json"])
    assert ok.exit_code == 0, ok.output
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:5000])
    bad = CliRunner().invoke(app, ["generate", "hello", "--chain", str(cut), "--max-new-tokens", "4"])
    assert bad.exit_code == 2 and bad.output.startswith("error: chain member 0 (") and "truncated or corrupt GGUF" in bad.output
    assert "Traceback" not in bad.output and bad.output.count("\n") == 1


def test_a_family_shares_one_tokenizer_build_and_each_file_keeps_its_chat_template(tmp_path, cache, monkeypatch):
    """Two files with one vocabulary and different chat templates: the second file's tokenizer
    folder is made from the first's (transformers' GGUF reader is not called again) and equals a
    folder built from the file itself: tokens, special tokens and chat template."""
    from transformers import AutoTokenizer

    write_tiny_gguf(tmp_path / "a.gguf")
    write_tiny_gguf(tmp_path / "b.gguf", chat_template="{% for m in messages %}[{{ m['content'] }}]{% endfor %}", seed=1)
    first = gguf_source.tokenizer_folder_for_gguf(tmp_path / "a.gguf")
    (whole_a, vocabulary_a), (whole_b, vocabulary_b) = (gguf_source.tokenizer_sha256(tmp_path / n) for n in ("a.gguf", "b.gguf"))
    assert vocabulary_a == vocabulary_b and whole_a != whole_b
    built = []
    original = AutoTokenizer.from_pretrained.__func__

    def counting(cls, *args, **kwargs):
        built.append(kwargs.get("gguf_file"))
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", classmethod(counting))
    second = gguf_source.tokenizer_folder_for_gguf(tmp_path / "b.gguf")
    assert second != first and built == [None]  # loaded from the first folder, no GGUF read
    shared = AutoTokenizer.from_pretrained(str(second))
    direct = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="b.gguf")
    assert shared.chat_template == direct.chat_template and "[" in shared.chat_template
    text = "def add(a, b):\n    return a + b <|end|>"
    assert shared(text)["input_ids"] == direct(text)["input_ids"] and shared.get_vocab() == direct.get_vocab()
    assert (shared.eos_token, shared.bos_token, shared.all_special_tokens) == (direct.eos_token, direct.bos_token, direct.all_special_tokens)
    message = [{"role": "user", "content": "hi"}]
    assert shared.apply_chat_template(message, tokenize=False) == direct.apply_chat_template(message, tokenize=False)
    assert gguf_source._record(second)["vocabulary_from"] == first.name
