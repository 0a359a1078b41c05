"""Only polyplan's own lines on stderr (`cli/commands/quiet.py`), other libraries' with `--verbose`.

`polyplan profile` runs as a subprocess with stderr piped (a log, not a terminal) on a GGUF
target that transformers dequantizes (its tqdm bars: "Converting and de-quantizing GGUF
tensors", "Writing model shards") and, where the bindings are installed, a llama.cpp drafter
(llama.cpp logs every key of the file it loads). Every stderr line must be polyplan's, among
them one progress line per measured entry; with `--verbose` the other libraries' lines are back
(the negative control).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from polyplan.cli.commands.quiet import QUIET_ENVIRONMENT
from tiny_gguf import TARGET_LAYERS, write_tiny_gguf

HAS_LLAMA = importlib.util.find_spec("llama_cpp") is not None
STAGE = re.compile(r"^\[polyplan\] profile (\d+)/(\d+) \((.+)\) done, \S+ elapsed(, ~\S+ left)?$")
POLYPLAN_LINE = ("[polyplan] ", "warning: ", "note: ", "waiting: ")  # progress, and polyplan's own messages
TINY = ["--threads", "1", "--temperatures", "0", "--no-decoded", "--new-tokens", "8", "--latency-ks", "1,2",
        "--context-lengths", "8,16", "--repeats", "3", "--warmup", "1", "--noise-budget", "0"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("quiet")
    # the target clearly costlier than the 1-layer drafter: the profiler pairs a drafter only with a
    # costlier verifier, and 2 layers against 1 are within the timing noise of so small a model
    write_tiny_gguf(root / "target.gguf", layers=TARGET_LAYERS)
    write_tiny_gguf(root / "small.gguf", seed=1, layers=1)
    drafter = "{name: small, source: ./small.gguf, engine: llama.cpp}" if HAS_LLAMA else "{name: small, source: ./small.gguf}"
    (root / "models.yaml").write_text(
        "candidates:\n"
        "  - {name: target, source: ./target.gguf, target: true}\n"
        f"  - {drafter}\n"
        "  - {name: ngram, derive: {kind: ngram, max_n: 3}}\n"
    )
    lines = [json.dumps({"turns": [" ".join(f"w{(7 * i + j) % 60 + 4}" for j in range(20))]}) for i in range(3)]
    (root / "prompts.jsonl").write_text("\n".join(lines) + "\n")
    return root


def _profile(workspace: Path, tmp_path: Path, *general: str) -> subprocess.CompletedProcess:
    """`polyplan [general] profile ...` in a child with stderr piped and a fresh cache (so the
    GGUF is dequantized in this run); none of the quiet variables inherited from this process."""
    environment = {key: value for key, value in os.environ.items() if key not in QUIET_ENVIRONMENT}
    environment["POLYPLAN_CACHE_DIR"] = str(tmp_path / "cache")
    command = [sys.executable, "-c", "from polyplan.cli.app import main; main()", *general, "profile",
               "--candidates", str(workspace / "models.yaml"), "--prompts", str(workspace / "prompts.jsonl"),
               "--out", str(tmp_path / "p.json"), *TINY]
    return subprocess.run(command, capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=300)


def test_profile_in_a_log_prints_polyplan_lines_only(workspace, tmp_path):
    done = _profile(workspace, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    foreign = [line for line in lines if not line.startswith(POLYPLAN_LINE)]
    assert not foreign, f"lines on stderr that are not polyplan's: {foreign[:5]}"
    stages = [STAGE.match(line) for line in lines if line.startswith("[polyplan] profile ")]
    assert all(stages), lines
    assert len(stages) == 7  # 3 latency curves, 3 pairs at one temperature, the loop costs, all measured
    assert [int(stage.group(1)) for stage in stages] == [1, 2, 3, 4, 5, 6, 7] and {stage.group(2) for stage in stages} == {"7"}
    assert stages[0].group(3) == "latency target" and stages[0].group(4) and not stages[-1].group(4)  # no time left at the end
    assert stages[-1].group(3).startswith("loop costs")
    assert "T(1) ms" in done.stdout  # the results stay on stdout


def test_verbose_shows_the_other_libraries_output(workspace, tmp_path):
    """The negative control: the same run with `--verbose` prints what the default hides."""
    done = _profile(workspace, tmp_path, "--verbose")
    assert done.returncode == 0, done.stderr
    assert "Converting and de-quantizing GGUF tensors" in done.stderr  # transformers' bare tqdm bar
    assert "Writing model shards" in done.stderr
    if HAS_LLAMA:
        assert "llama_model_loader" in done.stderr  # llama.cpp's own log
    assert re.search(r"^\[polyplan\] profile 7/7 ", done.stderr, re.M)


_EMIT = """
import logging, sys, warnings
from polyplan.cli.commands.quiet import quiet_other_libraries
warnings.simplefilter("always")
quiet_other_libraries(sys.argv[1] == "verbose")
logging.getLogger("accelerate.utils").warning("foreign log record")
warnings.warn_explicit("foreign warning", FutureWarning, "modeling_utils.py", 1, module="transformers.modeling_utils")
warnings.warn_explicit("own warning", UserWarning, "chain.py", 1, module="polyplan.decoder.chain")
"""


@pytest.mark.parametrize("mode", ["quiet", "verbose"])
def test_other_warnings_and_logs_are_dropped_polyplan_warnings_kept(mode):
    environment = {key: value for key, value in os.environ.items() if key not in QUIET_ENVIRONMENT}
    done = subprocess.run([sys.executable, "-c", _EMIT, mode], capture_output=True, text=True, env=environment, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "own warning" in done.stderr
    shown = mode == "verbose"
    assert ("foreign warning" in done.stderr) == shown and ("foreign log record" in done.stderr) == shown


def test_the_cli_imports_no_library_whose_environment_it_sets():
    """The quiet variables are read when those libraries are imported: after the CLI starts."""
    probe = "import sys, polyplan.cli.app; print(sorted({'tqdm', 'transformers', 'huggingface_hub', 'torch', 'llama_cpp'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
