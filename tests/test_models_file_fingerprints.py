"""File fingerprints kept in the cache by (absolute path, size, mtime_ns)
(`models.file_fingerprints`): the same values as hashing the files, a second call that reads
no file, a touched, resized, added or removed file hashed again, and a cache that cannot be
written costing only a re-hash."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import polyplan.models.file_fingerprints as kept
from polyplan.models.file_fingerprints import cache_path, file_fingerprint
from polyplan.models.hashing import fingerprint_files


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("POLYPLAN_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def hashes(monkeypatch) -> list[Path]:
    """Every path the hasher reads (it still hashes)."""
    calls: list[Path] = []
    monkeypatch.setattr(kept, "fingerprint_files", lambda paths: calls.extend(paths) or fingerprint_files(paths))
    return calls


def _model(folder: Path) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text('{"layers": 2}')
    (folder / "weights.bin").write_bytes(bytes(range(256)) * 64)
    (folder / "sub").mkdir()
    (folder / "sub" / "tokenizer.json").write_text("{}")
    return folder


def _touch(file: Path, step_ns: int = 1_000_000_000) -> None:
    """Move the file's mtime on (as an edit would), contents unchanged."""
    status = file.stat()
    os.utime(file, ns=(status.st_atime_ns, status.st_mtime_ns + step_ns))


def test_the_values_are_those_of_hashing_the_files(cache, tmp_path):
    folder = _model(tmp_path / "model")
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(1000))
    for path in (folder, gguf):
        first, second = file_fingerprint(path), file_fingerprint(path)  # hashed, then from the cache
        assert first == second == fingerprint_files([path])
    relative = os.path.relpath(gguf)
    assert file_fingerprint(relative) == fingerprint_files([gguf])  # keyed by the absolute path


def test_a_second_call_reads_no_file(cache, tmp_path, hashes):
    folder = _model(tmp_path / "model")
    file_fingerprint(folder)
    assert hashes == [folder]  # negative control: the first call hashes
    assert cache_path().is_file()
    file_fingerprint(folder)
    file_fingerprint(str(folder))
    assert hashes == [folder]


def test_a_changed_file_is_hashed_again(cache, tmp_path, hashes):
    folder = _model(tmp_path / "model")
    before = file_fingerprint(folder)
    _touch(folder / "sub" / "tokenizer.json")  # touched: same bytes, same value, read again
    assert file_fingerprint(folder) == before and len(hashes) == 2
    (folder / "weights.bin").write_bytes(bytes(100))  # resized
    after = file_fingerprint(folder)
    assert after != before and after == fingerprint_files([folder]) and len(hashes) == 3
    (folder / "extra.txt").write_text("x")  # added
    assert file_fingerprint(folder) == fingerprint_files([folder]) and len(hashes) == 4
    (folder / "extra.txt").unlink()  # removed
    assert file_fingerprint(folder) == after and len(hashes) == 5
    assert file_fingerprint(folder) == after and len(hashes) == 5  # and kept again


def test_same_size_new_contents_with_a_new_mtime_is_hashed_again(cache, tmp_path, hashes):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"a" * 64)
    before = file_fingerprint(gguf)
    gguf.write_bytes(b"b" * 64)
    _touch(gguf)  # a coarse clock may give the rewrite the old mtime: make it differ, as it would
    assert file_fingerprint(gguf) == fingerprint_files([gguf]) != before
    assert len(hashes) == 2


def test_paths_are_kept_apart_and_gone_paths_pruned(cache, tmp_path, hashes):
    one, two = tmp_path / "one.gguf", tmp_path / "two.gguf"
    one.write_bytes(b"1" * 10)
    two.write_bytes(b"2" * 10)
    assert file_fingerprint(one) != file_fingerprint(two)
    gone = tmp_path / "gone.gguf"
    gone.write_bytes(b"3")
    file_fingerprint(gone)
    gone.unlink()
    file_fingerprint(two)  # from the cache: nothing rewritten
    third = tmp_path / "three.gguf"
    third.write_bytes(b"4")
    file_fingerprint(third)  # a write prunes what no longer exists
    assert set(json.loads(cache_path().read_text())["files"]) == {str(one), str(two), str(third)}


def test_an_unwritable_or_corrupt_cache_costs_a_re_hash_not_an_error(tmp_path, monkeypatch, hashes):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"x" * 32)
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("POLYPLAN_CACHE_DIR", str(blocked))
    assert file_fingerprint(gguf) == file_fingerprint(gguf) == fingerprint_files([gguf])
    assert len(hashes) == 2
    monkeypatch.setenv("POLYPLAN_CACHE_DIR", str(tmp_path / "cache"))
    cache_path().parent.mkdir()
    cache_path().write_text("{not json")
    assert file_fingerprint(gguf) == fingerprint_files([gguf]) and len(hashes) == 3
    assert file_fingerprint(gguf) == fingerprint_files([gguf]) and len(hashes) == 3  # the corrupt file was replaced


def test_a_missing_file_fails_as_hashing_it_did(cache, tmp_path):
    with pytest.raises(FileNotFoundError):
        file_fingerprint(tmp_path / "missing.gguf")


def test_model_fingerprints_keep_the_values_they_had_before_the_cache(cache, monkeypatch):
    """A profile or plan made before the cache still matches: hashed, or read from the cache,
    every candidate's fingerprint is what hashing its files directly gives."""
    import polyplan.models.fingerprints as fingerprints
    from polyplan.formats.candidates import read_candidates
    from polyplan.models.fingerprints import candidate_fingerprints

    zoo = Path(__file__).resolve().parents[1] / "examples" / "zoo.yaml"
    hashed, cached = candidate_fingerprints(read_candidates(zoo)), candidate_fingerprints(read_candidates(zoo))
    monkeypatch.setattr(fingerprints, "file_fingerprint", lambda path: fingerprint_files([Path(path)]))  # as before
    assert hashed == cached == candidate_fingerprints(read_candidates(zoo))


def test_a_gguf_s_sha256_is_kept_beside_its_fingerprint(cache, tmp_path, monkeypatch):
    from polyplan.models import gguf_source
    from polyplan.models.file_fingerprints import content_sha256

    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(5000))
    reads: list[Path] = []
    raw = gguf_source.file_sha256
    monkeypatch.setattr(gguf_source, "file_sha256", lambda path: reads.append(Path(path)) or raw(path))
    assert content_sha256(gguf) == raw(gguf) and reads == [gguf]
    fingerprint = file_fingerprint(gguf)
    assert content_sha256(gguf) == raw(gguf) and reads == [gguf]  # kept, beside the fingerprint
    assert file_fingerprint(gguf) == fingerprint
    _touch(gguf)
    assert content_sha256(gguf) == raw(gguf) and reads == [gguf, gguf]


def test_generate_plan_on_a_gguf_hashes_nothing_after_its_first_run(cache, tmp_path, monkeypatch, hashes):
    """The issue's measurement in small: `generate --plan` with a llama.cpp GGUF target and an
    n-gram drafter reads no file to hash it on its second run (neither its fingerprint nor the
    sha256 naming its cached tokenizer), and reads it again once the file is touched."""
    pytest.importorskip("llama_cpp")
    import yaml
    from typer.testing import CliRunner

    from conftest import synthetic_plan
    from polyplan.cli.app import app
    from polyplan.models import gguf_source
    from tiny_gguf import write_tiny_gguf

    gguf = tmp_path / "tiny.gguf"
    write_tiny_gguf(gguf)
    models = tmp_path / "models.yaml"
    models.write_text(yaml.safe_dump({"candidates": [
        {"name": "tiny", "source": str(gguf), "engine": "llama.cpp", "target": True},
        {"name": "ngram", "derive": {"kind": "ngram", "max_n": 4, "min_n": 1}},
    ]}))
    plan = synthetic_plan(tmp_path, models, {"tiny": 0.01, "ngram": 0.0002}, {("tiny", "ngram"): 0.6}, max_levels=2)
    sha_reads: list[Path] = []
    raw = gguf_source.file_sha256
    monkeypatch.setattr(gguf_source, "file_sha256", lambda path: sha_reads.append(Path(path)) or raw(path))

    def generate() -> dict:
        result = CliRunner().invoke(app, ["generate", "--plan", str(plan), "--max-new-tokens", "4", "--raw-prompts", "--json", "def f(x):"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    first = generate()
    assert [level["model"] for level in first["levels"]] == ["tiny", "ngram"]
    hashes.clear(), sha_reads.clear()
    assert generate()["token_ids"] == first["token_ids"]
    assert hashes == [] and sha_reads == []  # the second run hashes nothing
    _touch(gguf)
    generate()
    assert hashes == [gguf] and sha_reads == [gguf]  # negative control: a touched file is read again
