"""llama.cpp's own tools (llama-server, llama-bench), built once from source into the polyplan cache.

The source is the llama.cpp that llama-cpp-python's source distribution vendors at the pinned
version (`BINDINGS_VERSION`), so the server polyplan races and the bindings its llama.cpp members
use are the same llama.cpp. `build()` moves `bin/` into place last: a partial build never looks
finished.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from polyplan.formats.cache import cache_root
from polyplan.formats.errors import PolyplanError

BINDINGS_VERSION = "0.3.36"  # llama-cpp-python; keep equal to pyproject's `llama` extra
TOOLS = ("llama-server", "llama-bench")
BUILD_COMMAND = "polyplan engines build llama.cpp"
# No network at build time: no prebuilt web UI download, no HTTPS client, no tests or examples.
_CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TOOLS=ON", "-DBUILD_SHARED_LIBS=OFF",
)


@dataclass(frozen=True)
class LlamaCppBuild:
    """A finished build: its folder and the tools in it."""

    root: Path
    version: str

    @property
    def server(self) -> Path:
        return self.root / "bin" / "llama-server"

    @property
    def bench(self) -> Path:
        return self.root / "bin" / "llama-bench"


def build_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the pinned build lives."""
    return cache_root(cache_dir) / "engines" / f"llama.cpp-{BINDINGS_VERSION}"


def find_build(cache_dir: str | os.PathLike[str] | None = None) -> LlamaCppBuild | None:
    """The finished build, or None."""
    found = LlamaCppBuild(build_root(cache_dir), BINDINGS_VERSION)
    return found if all((found.root / "bin" / tool).is_file() for tool in TOOLS) else None


def _other_builds(cache_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """The versions of finished builds of another llama-cpp-python than the pinned one (a build
    left by an older polyplan), oldest name first."""
    engines = cache_root(cache_dir) / "engines"
    prefix = "llama.cpp-"
    return sorted(folder.name[len(prefix):] for folder in engines.glob(f"{prefix}*")
                  if folder.name != build_root(cache_dir).name and all((folder / "bin" / tool).is_file() for tool in TOOLS))


def require_build(cache_dir: str | os.PathLike[str] | None = None) -> LlamaCppBuild:
    """The finished build, or one line naming the command that makes it (a build of another
    version is not used: polyplan's replayed rules and printed flags are the pinned llama.cpp's)."""
    found = find_build(cache_dir)
    if found is None:
        others = _other_builds(cache_dir)
        if others:
            raise PolyplanError(f"llama.cpp's server is built for llama-cpp-python {', '.join(others)}, not {BINDINGS_VERSION}, "
                                f"the llama.cpp polyplan's replayed rules and flags are pinned to; run `{BUILD_COMMAND}` once "
                                "(about 6 minutes on 2 cores)")
        raise PolyplanError(f"llama.cpp's server is not built yet; run `{BUILD_COMMAND}` once (about 6 minutes on 2 cores)")
    return found


def build(*, jobs: int | None = None, cache_dir: str | os.PathLike[str] | None = None, log=lambda line: None) -> LlamaCppBuild:
    """Build the pinned llama.cpp tools into the cache (a finished build is returned as it is).

    Raises:
        PolyplanError: pip cannot fetch the source, cmake/ninja/a compiler is missing, or the
            build fails (the last lines of its log are named, and the log is kept).
    """
    found = find_build(cache_dir)
    if found is not None:
        return found
    for tool in ("cmake", "ninja"):
        if shutil.which(tool) is None:
            raise PolyplanError(f"building llama.cpp needs {tool} on PATH (e.g. `apt-get install {tool}` or `pip install {tool}`)")
    root = build_root(cache_dir)
    root.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{root.name}.partial-", dir=root.parent))
    log_file = root.parent / f"{root.name}-build.log"
    try:
        source = _fetch_source(work, log)
        out = work / "build"
        jobs = jobs or os.cpu_count() or 1
        log(f"building {', '.join(TOOLS)} from llama-cpp-python {BINDINGS_VERSION}'s llama.cpp (log: {log_file})")
        with open(log_file, "w", encoding="utf-8") as stream:
            _run(["cmake", "-S", str(source), "-B", str(out), "-G", "Ninja", *_CMAKE_OPTIONS], stream, log_file)
            _run(["cmake", "--build", str(out), "-j", str(jobs), "--target", *TOOLS], stream, log_file)
        staged = work / "bin"
        staged.mkdir()
        for tool in TOOLS:
            shutil.copy2(out / "bin" / tool, staged / tool)
        root.mkdir(exist_ok=True)
        if (root / "bin").exists():
            shutil.rmtree(root / "bin")
        os.rename(staged, root / "bin")  # last: a build without bin/ is not finished
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return LlamaCppBuild(root, BINDINGS_VERSION)


def _fetch_source(work: Path, log) -> Path:
    """Download the bindings' source distribution with pip and unpack its llama.cpp."""
    log(f"fetching llama-cpp-python {BINDINGS_VERSION}'s source distribution with pip")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q",
               f"llama-cpp-python=={BINDINGS_VERSION}", "-d", str(work)]
    done = subprocess.run(command, capture_output=True, text=True)
    archives = sorted(work.glob("llama_cpp_python-*.tar.gz"))
    if done.returncode != 0 or not archives:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no archive"]
        raise PolyplanError(f"pip could not fetch llama-cpp-python {BINDINGS_VERSION}'s source ({last[0]})")
    prefix = archives[0].name[: -len(".tar.gz")] + "/vendor/llama.cpp/"
    with tarfile.open(archives[0]) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(prefix)]
        archive.extractall(work / "src", members=members, filter="data")
    return work / "src" / prefix.rstrip("/")


def _run(command: list[str], stream, log_file: Path) -> None:
    stream.write("$ " + " ".join(command) + "\n")
    stream.flush()
    done = subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        lines = log_file.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        raise PolyplanError(f"building llama.cpp failed ({lines[-1] if lines else 'no output'}); the log is {log_file}")
