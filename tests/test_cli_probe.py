"""The polyplan CLI probed as a careless or hostile user would: 570 commands in classes (bad
files, wrong types and values in every field of a profile, plan and models.yaml, numbers and
options, devices, clashing paths, unwritable outputs, seeded random mutations, sanity runs),
each of which must be

- refused with exit 2 and exactly one `error: ...` line on stderr (where the input is wrong),
- or run with exit 0 (sanity runs, harmless mutations),

and must leave every file the user made (an input, an unrelated file) as it was. Each case
runs in-process through typer's CliRunner, or as a subprocess of this interpreter's
`polyplan` where a signal or a second process is the point. The classes that load models
(broken model folders, SIGINT/SIGKILL mid-profile, a full disk, concurrent runs, fewer
candidates) are slow tests. Nothing is downloaded: the models are conftest's tiny family.
(This was tools/probe_cli.py, a script that counted outcomes and asserted nothing.)
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAPER = ROOT / "polyplan" / "data" / "paper_table1_profile.json"  # the one copy, shipped in the package
ZOO = ROOT / "examples" / "zoo.yaml"

EXPECT_ERROR, EXPECT_OK, EXPECT_EITHER = "error", "ok", "either"
# this interpreter's own entry point (not whichever polyplan is first on PATH)
POLYPLAN = str(Path(sys.executable).with_name("polyplan")) if Path(sys.executable).with_name("polyplan").is_file() else "polyplan"


@dataclass
class Case:
    """One probe: a command line, what it should do, and the files it must not damage."""

    klass: str
    label: str
    args: list[str]
    expect: str = EXPECT_ERROR
    watch: list[Path] = field(default_factory=list)
    subprocess: bool = False
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    case: Case
    verdict: str  # clear | ok | traceback | silent
    lost: bool
    detail: str


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ("dir" if path.is_dir() else None)
    except OSError:
        return None


def run_case(case: Case) -> Outcome:
    before = {path: _digest(path) for path in case.watch}
    if case.subprocess:
        env = {**os.environ, **case.env}
        done = subprocess.run([POLYPLAN, *case.args], capture_output=True, text=True, env=env, timeout=600)
        code, stderr, exception = done.returncode, done.stderr, None
    else:
        from typer.testing import CliRunner

        from polyplan.cli.app import app

        saved = {key: os.environ.get(key) for key in case.env}
        os.environ.update(case.env)
        try:
            result = CliRunner().invoke(app, case.args)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        code, stderr = result.exit_code, result.stderr
        exception = result.exception if not isinstance(result.exception, SystemExit) else None
    lines = stderr.strip().splitlines()
    one_line = code == 2 and len(lines) == 1 and lines[0].startswith("error: ")
    if exception is not None or (code != 0 and not one_line):
        verdict = "traceback"
        detail = repr(exception) if exception is not None else f"exit {code}: {stderr.strip()[-200:]}"
    elif code == 0:
        verdict = "silent" if case.expect == EXPECT_ERROR else "ok"
        detail = "exit 0"
    else:
        verdict = "clear" if case.expect != EXPECT_OK else "traceback"
        detail = lines[0]
    lost = any(_digest(path) != digest for path, digest in before.items())
    return Outcome(case, verdict, lost, detail)


# --------------------------------------------------------------------------- case builders


def _write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path


def _reader_commands(kind: str, path: Path, work: Path, plan: Path) -> list[str]:
    return {
        "profile": ["recommend", "--profile", str(path), "--out", str(work / "out-plan.json")],
        "plan": ["validate", "--plan", str(path), "--out", str(work / "report")],
        "models.yaml": ["validate", "--plan", str(plan), "--candidates", str(path), "--out", str(work / "report")],
        "prompts": ["validate", "--plan", str(plan), "--prompts", str(path), "--candidates", str(path), "--out", str(work / "report")],
    }[kind]


def file_cases(work: Path, plan: Path) -> list[Case]:
    """Damaged files of every kind: encoding, nesting, truncation, wrong top-level types."""
    originals = {"profile": PAPER.read_bytes(), "plan": plan.read_bytes(), "models.yaml": ZOO.read_bytes(),
                 "prompts": b'{"turns": ["def f():"]}\n'}
    damage: dict[str, Callable[[bytes], bytes]] = {
        "non-UTF-8": lambda data: b"\xff\xfe" + data,
        "latin-1 byte inside": lambda data: data[:20] + b"\xe9" + data[20:],
        "truncated": lambda data: data[: len(data) // 2],
        "empty": lambda data: b"",
        "deep JSON": lambda data: b"[" * 100_000 + b"]" * 100_000,
        "deep YAML": lambda data: b"a: " + b"[" * 5000 + b"]" * 5000,
        "top-level list": lambda data: b"[1, 2, 3]",
        "top-level string": lambda data: b'"hello"',
        "null": lambda data: b"null",
        "binary garbage": lambda data: bytes(random.Random(0).randrange(256) for _ in range(300)),
        "NUL bytes": lambda data: data.replace(b"{", b"{\x00", 1),
    }
    cases = []
    for kind, data in originals.items():
        suffix = {"profile": ".json", "plan": ".json", "models.yaml": ".yaml", "prompts": ".jsonl"}[kind]
        for name, damaged in damage.items():
            path = _write(work / "files" / f"{kind}-{name.replace(' ', '_')}{suffix}", damaged(data))
            cases.append(Case("bad files", f"{kind}: {name}", _reader_commands(kind, path, work, plan), watch=[path]))
        folder = work / "files" / f"{kind}-folder{suffix}"
        folder.mkdir(parents=True, exist_ok=True)
        cases.append(Case("bad files", f"{kind}: a folder", _reader_commands(kind, folder, work, plan)))
        cases.append(Case("bad files", f"{kind}: missing", _reader_commands(kind, work / "nowhere" / f"x{suffix}", work, plan)))
    duplicate = _write(work / "files" / "dup.yaml", "candidates:\n  - name: a\n    name: b\n    source: builtin:target\n    target: true\n")
    cases.append(Case("bad files", "models.yaml: duplicate key", _reader_commands("models.yaml", duplicate, work, plan)))
    return cases


HOSTILE_VALUES = [None, True, "x", [1, 2], {"a": 1}, -1, 0, 10**400, 1e307, float("nan")]


def _json_text(value) -> str:
    return json.dumps(value).replace("NaN", "NaN")


def _set(payload, path, value):
    target = payload
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


PROFILE_FIELDS = [
    ("target",), ("device",), ("models",), ("pairs",), ("meta",), ("schema_version",),
    ("models", 0, "latency", 0, "median_s"), ("models", 0, "latency", 0, "k"), ("models", 1, "name"),
    ("pairs", 0, "sampling", "greedy", "alpha"), ("pairs", 0, "sampling"), ("pairs", 0, "verifier"),
]
META_FIELDS = [("meta", "switch_cost"), ("meta", "loop_overhead"), ("meta", "acceptance_runs")]
PLAN_FIELDS = [
    ("alternatives", 0, "chain"), ("alternatives", 0, "block_sizes"), ("alternatives", 0, "exact"),
    ("alternatives", 0, "exact", "speedup"), ("alternatives",), ("loop_overhead",), ("switch_costs",), ("profile",),
    ("fingerprints",), ("sampling",), ("alternatives", 0, "paper"),
]
YAML_FIELDS = [("candidates",), ("candidates", 0, "name"), ("candidates", 0, "source"), ("candidates", 0, "device"),
               ("candidates", 1, "derive"), ("candidates", 0, "target")]


def field_cases(work: Path, plan: Path) -> list[Case]:
    """One field of each format set to each hostile value (expected: refused; a few are valid)."""
    import yaml

    cases = []
    formats = [
        ("profile", json.loads(PAPER.read_text()), PROFILE_FIELDS, ".json"),
        ("profile meta", json.loads(PAPER.read_text()), META_FIELDS, ".json"),
        ("plan", json.loads(plan.read_text()), PLAN_FIELDS, ".json"),
        ("models.yaml", yaml.safe_load(ZOO.read_text()), YAML_FIELDS, ".yaml"),
    ]
    for kind, original, fields, suffix in formats:
        for index, path in enumerate(fields):
            for value_index, value in enumerate(HOSTILE_VALUES):
                payload = json.loads(json.dumps(original))
                if kind == "profile meta":
                    payload.setdefault("meta", {})
                _set(payload, path, value)
                text = yaml.safe_dump(payload) if suffix == ".yaml" else json.dumps(payload)
                file = _write(work / "fields" / f"{kind.replace(' ', '_')}-{index}-{value_index}{suffix}", text)
                reader = "profile" if kind.startswith("profile") else kind
                # a plan is never validated here (it records no models.yaml), so the "plan" and
                # "models.yaml" cases always end in an error; a profile may stay valid (e.g. device: "x").
                expect = EXPECT_ERROR
                if reader == "profile" and path in {("device",), ("meta",)}:
                    expect = EXPECT_EITHER  # free text / free-form
                if kind == "profile meta" and (value is None or value == {"a": 1}):
                    expect = EXPECT_EITHER  # no table (null) or a table without the entry: "none recorded"
                if path == ("pairs", 0, "sampling", "greedy", "alpha") and value == 0:
                    expect = EXPECT_EITHER  # alpha 0 is a valid acceptance rate
                label = f"{kind}: {'.'.join(map(str, path))} = {str(value)[:12]}"
                cases.append(Case("wrong types and values", label, _reader_commands(reader, file, work, plan), expect, watch=[file]))
    return cases


def option_cases(work: Path, profile: Path) -> list[Case]:
    """Numeric ranges and options a command would ignore."""
    out = str(work / "o.json")
    recommend = ["recommend", "--profile", str(profile), "--out", out]
    table = [
        (recommend + ["--k-max", "100000"], EXPECT_ERROR), (recommend + ["--k-max", "0"], EXPECT_ERROR),
        (recommend + ["--k-max", "-5"], EXPECT_ERROR), (recommend + ["--max-levels", "0"], EXPECT_ERROR),
        (recommend + ["--max-levels", "-1"], EXPECT_ERROR), (recommend + ["--search", "optuna", "--seed", "-1"], EXPECT_ERROR),
        (recommend + ["--seed", str(2**40)], EXPECT_ERROR), (recommend + ["--search", "nope"], EXPECT_ERROR),
        (recommend + ["--sampling", "t1.0"], EXPECT_ERROR), (recommend + ["--sampling", "bogus"], EXPECT_ERROR),
        (recommend + ["--prompts", "x.jsonl"], EXPECT_ERROR), (recommend + ["--threads", "2"], EXPECT_ERROR),
        (recommend + ["--device", "cpu"], EXPECT_ERROR), (recommend + ["--cache-dir", str(work)], EXPECT_ERROR),
        (["recommend", "--out", out], EXPECT_ERROR),
        (["theory", "capped-geometric", "--alpha", "0.5", "--k", str(10**400)], EXPECT_ERROR),
        (["theory", "capped-geometric", "--alpha", "0.5", "--k", "0"], EXPECT_ERROR),
        (["theory", "capped-geometric", "--alpha", "1.0", "--k", "2"], EXPECT_ERROR),
        (["theory", "capped-geometric", "--alpha", "-0.1", "--k", "2"], EXPECT_ERROR),
        (["theory", "capped-geometric", "--alpha", "nan", "--k", "2"], EXPECT_ERROR),
        (["theory", "capped-geometric", "--alpha", "inf", "--k", "2"], EXPECT_ERROR),
        (["theory", "insertion", "--t1", "0", "--t2", "1", "--t2-new", "1", "--l1", "2", "--l1-new", "3", "--l2-new", "2"], EXPECT_ERROR),
        (["theory", "insertion", "--t1", "nan", "--t2", "1", "--t2-new", "1", "--l1", "2", "--l1-new", "3", "--l2-new", "2"], EXPECT_ERROR),
        (["theory", "insertion", "--t1", "1e400", "--t2", "1", "--t2-new", "1", "--l1", "2", "--l1-new", "3", "--l2-new", "2"], EXPECT_ERROR),
        (["bench", "decoder", "--threads", "0"], EXPECT_ERROR), (["bench", "decoder", "--prompts", "0"], EXPECT_ERROR),
        (["bench", "decoder", "--block-size", "100000"], EXPECT_ERROR), (["bench", "decoder", "--repeats", "0"], EXPECT_ERROR),
        (["generate", "hi", "--chain", ".", "--block-sizes", "100000"], EXPECT_ERROR),
        (["generate", "hi", "--chain", ".", "--block-sizes", "0"], EXPECT_ERROR),
        (["generate", "hi", "--chain", ".", "--seed", "-1"], EXPECT_ERROR),
        (["generate", "hi", "--chain", ".", "--max-new-tokens", "0"], EXPECT_ERROR),
        (["generate", "hi", "--chain", ".", "--temperature", "-1"], EXPECT_ERROR),
        (["generate", "hi", "--chain", ".", "--top-p", "0"], EXPECT_ERROR),
        (["generate", "hi", "--chain", ".", "--top-k", "0"], EXPECT_ERROR),
        (["profile", "--max-prompts", "0"], EXPECT_ERROR), (["profile", "--latency-ks", "1,100000"], EXPECT_ERROR),
        (["profile", "--latency-ks", "a,b"], EXPECT_ERROR), (["profile", "--repeats", "0"], EXPECT_ERROR),
        (["profile", "--seed", "-1"], EXPECT_ERROR), (["profile", "--threads", "-1"], EXPECT_ERROR),
        (["profile", "--temperatures", "nan"], EXPECT_ERROR), (["profile", "--block-sizes", "0"], EXPECT_ERROR),
        (["demo", "--max-levels", "0"], EXPECT_ERROR), (["demo", "--threads", "0"], EXPECT_ERROR),
        (["demo", "--repeats", "0"], EXPECT_ERROR), (["demo", "--top", "-1"], EXPECT_ERROR),
        (["validate", "--plan", str(work / "plan.json"), "--threads", "0"], EXPECT_ERROR),
        (["validate", "--plan", str(work / "plan.json"), "--top", "-1", "--out", str(work / "r")], EXPECT_ERROR),
        (["validate", "--plan", str(work / "plan.json"), "--seed", "-1"], EXPECT_ERROR),
        (["theory", "capped-geometric", "--alpha", "1e-100", "--k", "2"], EXPECT_OK),
        (["theory", "capped-geometric", "--alpha", "0", "--k", "1"], EXPECT_OK),
    ]
    return [Case("numbers and options", " ".join(args[:1] + args[-2:]), args, expect) for args, expect in table]


def device_cases(work: Path, plan: Path) -> list[Case]:
    yaml_cuda = _write(work / "dev" / "cuda.yaml", "candidates:\n  - {name: t, source: builtin:target, target: true, device: cuda}\n")
    cases = [
        Case("devices", f"{command} --device {device}", args + ["--device", device])
        for device in ("cuda", "cuda:7", "tpu9", "", "mps")
        for command, args in (("generate", ["generate", "hi", "--chain", "."]), ("bench", ["bench", "decoder"]))
    ]
    cases.append(Case("devices", "models.yaml device: cuda", ["models", "check", "--candidates", str(yaml_cuda)]))
    cases.append(Case("devices", "profile --device tpu9", ["profile", "--device", "tpu9", "--out", str(work / "dev" / "p.json")]))
    return cases


def path_cases(work: Path, profile: Path, plan: Path) -> list[Case]:
    """Outputs that clash with inputs or point where nothing can be written; the watched files
    must come out unchanged."""
    unrelated = _write(work / "paths" / "notes.txt", "mine\n")
    mixed = work / "paths" / "mixed"
    _write(mixed / "report.json", '{"mine": true}\n')
    md = work / "paths" / "md"
    _write(md / "report.md", "my notes\n")
    inside = work / "paths" / "d"
    _write(inside / "report.json", plan.read_bytes())
    plan_here = work / "paths" / "demo"
    _write(plan_here / "plan.json", "[1]\n")
    link = work / "paths" / "link.json"
    if not link.exists():
        link.symlink_to(profile)
    cases = [
        Case("clashing paths", "recommend --out = --profile", ["recommend", "--profile", str(profile), "--out", str(profile)], watch=[profile]),
        Case("clashing paths", "recommend --out = link to --profile", ["recommend", "--profile", str(link), "--out", str(profile)], watch=[profile]),
        Case("clashing paths", "recommend --out via ..", ["recommend", "--profile", str(profile), "--out", str(profile.parent / "." / profile.name)], watch=[profile]),
        Case("clashing paths", "recommend --candidates --out = models.yaml", ["recommend", "--candidates", str(ZOO), "--out", str(ZOO)], watch=[ZOO]),
        Case("clashing paths", "recommend --candidates --profile = models.yaml", ["recommend", "--candidates", str(ZOO), "--profile", str(ZOO), "--out", str(work / "o.json")], watch=[ZOO]),
        Case("clashing paths", "profile --out = models.yaml", ["profile", "--candidates", str(ZOO), "--out", str(ZOO)], watch=[ZOO]),
        Case("clashing paths", "validate --plan d/report.json --out d", ["validate", "--plan", str(inside / "report.json"), "--out", str(inside)], watch=[inside / "report.json"]),
        Case("clashing paths", "validate --out unrelated file", ["validate", "--plan", str(plan), "--out", str(unrelated)], watch=[unrelated]),
        Case("clashing paths", "validate --out folder with foreign report.json", ["validate", "--plan", str(plan), "--out", str(mixed)], watch=[mixed / "report.json"]),
        Case("clashing paths", "validate --out folder with foreign report.md", ["validate", "--plan", str(plan), "--out", str(md)], watch=[md / "report.md"]),
        Case("clashing paths", "demo --out unrelated file", ["demo", "--quick", "--out", str(unrelated)], watch=[unrelated]),
        Case("clashing paths", "demo --out folder with foreign report.json", ["demo", "--quick", "--out", str(mixed)], watch=[mixed / "report.json"]),
        Case("clashing paths", "demo --out folder with foreign plan.json", ["demo", "--quick", "--out", str(plan_here)], watch=[plan_here / "plan.json"]),
    ]
    for out in ("", "/proc/x", "/proc/x/y.json", str(work), str(work / "missing" / "x.json"), "/", "/dev/null/x"):
        cases.append(Case("unwritable outputs", f"recommend --out {out!r}", ["recommend", "--profile", str(profile), "--out", out], watch=[profile]))
        cases.append(Case("unwritable outputs", f"profile --out {out!r}", ["profile", "--out", out]))
    # ("" is not among them: typer reads it as ".", the current folder, a valid place for a report)
    for out in ("/proc/x", "/dev/null", str(unrelated), "/proc"):
        cases.append(Case("unwritable outputs", f"validate --out {out!r}", ["validate", "--plan", str(plan), "--out", out], watch=[unrelated]))
        cases.append(Case("unwritable outputs", f"demo --out {out!r}", ["demo", "--quick", "--out", out], watch=[unrelated]))
    return cases


def fuzz_cases(work: Path, plan: Path, count: int, seed: int = 0) -> list[Case]:
    """Random single-value mutations of the three formats (success or one line both fine)."""
    import yaml

    rng = random.Random(seed)
    formats = [("profile", json.loads(PAPER.read_text()), ".json"), ("plan", json.loads(plan.read_text()), ".json"),
               ("models.yaml", yaml.safe_load(ZOO.read_text()), ".yaml")]
    values = HOSTILE_VALUES + [[], {}, "", -0.0, 2**63, 1e-100, "../../x", [[[[]]]]]
    cases = []
    for index in range(count):
        kind, original, suffix = formats[index % 3]
        payload = json.loads(json.dumps(original))
        places = []

        def walk(value, path=()):
            if isinstance(value, dict):
                for key in value:
                    places.append(path + (key,))
                    walk(value[key], path + (key,))
            elif isinstance(value, list):
                for position, item in enumerate(value):
                    places.append(path + (position,))
                    walk(item, path + (position,))

        walk(payload)
        path = rng.choice(places)
        if rng.random() < 0.2:
            parent = payload
            for key in path[:-1]:
                parent = parent[key]
            del parent[path[-1]]
        else:
            _set(payload, path, rng.choice(values))
        text = yaml.safe_dump(payload) if suffix == ".yaml" else json.dumps(payload)
        file = _write(work / "fuzz" / f"{index}{suffix}", text)
        cases.append(Case("random mutations", f"{kind}: {'.'.join(map(str, path))}", _reader_commands(kind, file, work, plan),
                          EXPECT_EITHER, watch=[file]))
    return cases


def sanity_cases(work: Path, profile: Path) -> list[Case]:
    """Valid commands that must succeed (and write where they say)."""
    cases = []
    for levels in (1, 2, 3, 4):
        for k_max in (1, 4, 8, 16):
            out = str(work / "sanity" / f"plan-{levels}-{k_max}.json")
            (work / "sanity").mkdir(parents=True, exist_ok=True)
            cases.append(Case("sanity runs", f"recommend --max-levels {levels} --k-max {k_max}",
                              ["recommend", "--profile", str(profile), "--out", out, "--max-levels", str(levels), "--k-max", str(k_max)], EXPECT_OK, watch=[profile]))
    for search in ("grid", "optuna", "auto"):
        cases.append(Case("sanity runs", f"recommend --search {search}", ["recommend", "--profile", str(profile), "--search", search,
                                                                          "--out", str(work / "sanity" / f"{search}.json"), "--json"], EXPECT_OK, watch=[profile]))
    for alpha in ("0", "0.3", "0.9", "0.999999", "1e-100"):
        for k in ("1", "4", "1000000"):
            cases.append(Case("sanity runs", f"theory capped-geometric {alpha} {k}", ["theory", "capped-geometric", "--alpha", alpha, "--k", k], EXPECT_OK))
    cases.append(Case("sanity runs", "theory report", ["theory", "report"], EXPECT_OK))
    cases.append(Case("sanity runs", "theory insertion", ["theory", "insertion", "--t1", "1", "--t2", "0.1", "--t2-new", "0.3",
                                                          "--l1", "2", "--l1-new", "3", "--l2-new", "2.5", "--alpha", "1"], EXPECT_OK))
    cases.append(Case("sanity runs", "recommend --out in a fresh folder", ["recommend", "--profile", str(profile), "--out", str(work / "sanity" / "again.json")], EXPECT_OK))
    cases.append(Case("sanity runs", "recommend twice over its own plan", ["recommend", "--profile", str(profile), "--out", str(work / "sanity" / "again.json")], EXPECT_OK))
    return cases


# --------------------------------------------------------------------------- model cases


def model_workspace(work: Path) -> Path:
    from conftest import write_candidate_workspace  # the test suite's tiny models (built locally)

    return write_candidate_workspace(work / "models")


FAST = ["--new-tokens", "8", "--latency-ks", "1,2", "--context-lengths", "8,16", "--repeats", "3", "--warmup", "1",
        "--decoded-prompts", "2", "--block-sizes", "2", "--threads", "1", "--temperatures", "0"]


def _profile_args(workspace: Path, out: Path, candidates: Path | None = None) -> list[str]:
    return ["profile", "--candidates", str(candidates or workspace / "models.yaml"), "--prompts", str(workspace / "prompts.jsonl"),
            "--out", str(out), *FAST]


def _entries(path: Path) -> int:
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError):
        return -1
    return len(payload["models"]) + sum(len(pair["sampling"]) for pair in payload["pairs"])


@dataclass
class Scenario:
    label: str
    verdict: str
    lost: bool
    detail: str


def fault_scenarios(workspace: Path, work: Path) -> list[Scenario]:
    """SIGINT and SIGKILL mid-profile, a write that fails (file-size limit: a full disk as
    the process sees it), a rerun that must reuse every finished entry, two concurrent runs on
    one profile, and a run on fewer candidates that must keep the others' entries."""
    results = []
    env = {**os.environ, "POLYPLAN_LOCK_DIR": str(work)}
    for name, sig in (("SIGINT", signal.SIGINT), ("SIGKILL", signal.SIGKILL)):
        out = work / f"fault-{name}.json"
        process = subprocess.Popen([POLYPLAN, *_profile_args(workspace, out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 300
        while _entries(out) < 3 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        process.send_signal(sig)
        _, err = process.communicate(timeout=120)
        kept = _entries(out)
        rerun = subprocess.run([POLYPLAN, *_profile_args(workspace, out), "--json"], capture_output=True, text=True, env=env, timeout=600)
        reused = len(json.loads(rerun.stdout)["reused"]) if rerun.returncode == 0 else -1
        ok = kept >= 1 and rerun.returncode == 0 and reused >= 1
        results.append(Scenario(f"{name} mid-profile, then rerun", "ok" if ok else "traceback", kept < 1,
                                f"{kept} entries on disk after the signal; rerun reused {reused}; stderr {err.strip()[-80:]!r}"))

    out = work / "fault-full.json"
    subprocess.run([POLYPLAN, *_profile_args(workspace, out)], capture_output=True, env=env, timeout=600)
    before = out.read_bytes()
    limit = len(before) // 2

    def small_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    other = workspace / "models-more.yaml"
    other.write_text((workspace / "models.yaml").read_text() + "  - {name: ngram2, derive: {kind: ngram, max_n: 2}}\n")
    full = subprocess.run([POLYPLAN, *_profile_args(workspace, out, other)], capture_output=True, text=True, env=env, preexec_fn=small_disk, timeout=600)
    lines = full.stderr.strip().splitlines()
    # progress lines go to stderr too (issue 46): the run must end in one error line and no traceback
    clear = full.returncode == 2 and bool(lines) and lines[-1].startswith("error: ") and "Traceback" not in full.stderr
    results.append(Scenario("write fails (file-size limit) while extending", "clear" if clear else "traceback",
                            _entries(out) < 1, (lines or ["(no stderr)"])[-1][:160]))

    out = work / "concurrent.json"
    first = subprocess.Popen([POLYPLAN, *_profile_args(workspace, out), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    time.sleep(1.0)
    second = subprocess.Popen([POLYPLAN, *_profile_args(workspace, out), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out1, err1 = first.communicate(timeout=600)
    out2, err2 = second.communicate(timeout=600)
    both = first.returncode == 0 and second.returncode == 0
    measured = [len(json.loads(text)["measured"]) if both else -1 for text in (out1, out2)]
    # whichever run got the lock second must find everything measured (and say it waited,
    # unless the first was done before it asked)
    results.append(Scenario("two profile runs on one --out", "ok" if both and min(measured) == 0 else "silent", _entries(out) < 1,
                            f"the runs measured {measured[0]} and {measured[1]} entries; one said it waited: "
                            f"{'waiting:' in err1 or 'waiting:' in err2}"))

    out = work / "extend.json"
    subprocess.run([POLYPLAN, *_profile_args(workspace, out)], capture_output=True, env=env, timeout=600)
    entries = _entries(out)
    fewer = workspace / "models-two.yaml"
    fewer.write_text("candidates:\n  - {name: target, source: ./target, target: true}\n  - {name: ngram, derive: {kind: ngram, max_n: 3}}\n")
    rerun = subprocess.run([POLYPLAN, *_profile_args(workspace, out, fewer)], capture_output=True, text=True, env=env, timeout=600)
    after = _entries(out)
    results.append(Scenario("profile again with fewer candidates", "ok" if rerun.returncode == 0 else "traceback", after < entries,
                            f"{entries} entries before, {after} after"))

    foreign = work / "foreign.json"
    payload = json.loads(out.read_text())
    payload["target"] = "someone-else"
    payload["models"][0]["name"] = "someone-else"
    payload["pairs"] = []
    foreign.write_text(json.dumps(payload))
    before = foreign.read_bytes()
    cache = work / "cache"
    made = subprocess.run([POLYPLAN, "recommend", "--candidates", str(workspace / "models.yaml"), "--profile", str(foreign),
                           "--prompts", str(workspace / "prompts.jsonl"), "--out", str(work / "foreign-plan.json"), "--threads", "1",
                           "--cache-dir", str(cache)], capture_output=True, text=True, env=env, timeout=900)
    results.append(Scenario("recommend --candidates on a profile made for other models",
                            "ok" if made.returncode == 0 and "is kept as it is" in made.stderr else "traceback",
                            foreign.read_bytes() != before, (made.stderr.strip().splitlines() or [""])[0][:160]))
    return results


def model_cases(workspace: Path, work: Path) -> list[Case]:
    """Bad input that reaches the model loaders: broken weights and config, late checks."""
    broken = work / "broken"
    shutil.copytree(workspace / "target", broken / "weights", dirs_exist_ok=True)
    (broken / "weights" / "model.safetensors").write_bytes(b"not a safetensors file")
    shutil.copytree(workspace / "target", broken / "config", dirs_exist_ok=True)
    (broken / "config" / "config.json").write_text("{ not json")
    shutil.copytree(workspace / "target", broken / "config2", dirs_exist_ok=True)
    (broken / "config2" / "config.json").write_text('{"model_type": "llama", "hidden_size": "x"}')
    plan = work / "model-plan.json"
    subprocess.run([POLYPLAN, "recommend", "--candidates", str(workspace / "models.yaml"), "--profile", str(work / "extend.json"),
                    "--prompts", str(workspace / "prompts.jsonl"), "--out", str(plan), "--threads", "1"], capture_output=True, timeout=900)
    cases = [
        Case("model files", "generate: corrupt model.safetensors", ["generate", "hi", "--chain", str(broken / "weights")]),
        Case("model files", "generate: config.json not JSON", ["generate", "hi", "--chain", str(broken / "config")]),
        Case("model files", "generate: config.json wrong type", ["generate", "hi", "--chain", str(broken / "config2")]),
        Case("late checks", "validate --out /proc/x (models recorded)", ["validate", "--plan", str(plan), "--out", "/proc/x"], watch=[plan]),
        Case("late checks", "validate --max-prompts 0", ["validate", "--plan", str(plan), "--max-prompts", "0", "--out", str(work / "r")]),
        Case("late checks", "validate --top -1", ["validate", "--plan", str(plan), "--top", "-1", "--out", str(work / "r")]),
        Case("late checks", "demo --max-levels 0 --candidates", ["demo", "--candidates", str(workspace / "models.yaml"), "--max-levels", "0"]),
        Case("sanity runs", "validate a real plan (tiny)", ["validate", "--plan", str(plan), "--prompts", str(workspace / "prompts.jsonl"),
                                                            "--top", "0", "--new-tokens", "4", "--repeats", "1", "--threads", "1",
                                                            "--out", str(work / "report-ok")], EXPECT_OK, watch=[plan]),
        Case("sanity runs", "generate on the tiny target", ["generate", "w5 w6", "--chain", f"{workspace / 'target'},{workspace / 'small'}",
                                                            "--max-new-tokens", "4"], EXPECT_OK),
        Case("sample size", "profile --max-prompts 1 (flagged)", _profile_args(workspace, work / "one.json") + ["--max-prompts", "1"], EXPECT_OK),
    ]
    return cases


# --------------------------------------------------------------------------- main


def _unclean(outcomes: list[Outcome]) -> list[str]:
    """One line per case that was not clean: a traceback, a wrong input accepted, a file lost."""
    return [f"[{outcome.verdict}{', lost' if outcome.lost else ''}] {outcome.case.klass}: {outcome.case.label}: {outcome.detail[:200]}"
            for outcome in outcomes if outcome.verdict in ("traceback", "silent") or outcome.lost]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A folder with the paper's profile and its plan, and a cache inside it."""
    folder = tmp_path_factory.mktemp("probe")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("POLYPLAN_CACHE_DIR", str(folder / "cache"))
        profile = folder / "profile.json"
        shutil.copy(PAPER, profile)
        plan = folder / "plan.json"
        from typer.testing import CliRunner

        from polyplan.cli.app import app

        made = CliRunner().invoke(app, ["recommend", "--profile", str(profile), "--out", str(plan)])
        assert made.exit_code == 0, made.output
        yield folder, profile, plan


FUZZ = 60  # seeded random mutations of the plan


@pytest.mark.parametrize(
    "build",
    [
        lambda work, profile, plan: file_cases(work, plan),
        lambda work, profile, plan: field_cases(work, plan),
        lambda work, profile, plan: option_cases(work, profile),
        lambda work, profile, plan: device_cases(work, plan),
        lambda work, profile, plan: path_cases(work, profile, plan),
        lambda work, profile, plan: fuzz_cases(work, plan, FUZZ),
        lambda work, profile, plan: sanity_cases(work, profile),
    ],
    ids=["bad files", "wrong types and values", "numbers and options", "devices", "clashing paths and unwritable outputs",
         "random mutations", "sanity runs"],
)
def test_every_probe_is_one_clear_line_or_a_clean_run_and_loses_no_file(work, build, single_thread):
    cases = build(*work)
    outcomes = [run_case(case) for case in cases]
    assert len(outcomes) >= 10  # the class was probed
    assert not _unclean(outcomes), "\n".join(_unclean(outcomes))
    # the classes mean something: wrong input is refused, sanity runs succeed
    verdicts = {outcome.verdict for outcome in outcomes}
    assert verdicts <= {"clear", "ok"} and (verdicts & {"clear"} or all(case.expect != EXPECT_ERROR for case in cases))


@pytest.mark.slow
def test_model_cases_and_faults_are_clean(work, single_thread):
    """Broken model folders, signals and a full disk mid-profile, two runs on one profile,
    a run on fewer candidates: each clean (what `fault_scenarios` describes)."""
    folder, _, _ = work
    workspace = model_workspace(folder)
    scenarios = fault_scenarios(workspace, folder)
    outcomes = [run_case(case) for case in model_cases(workspace, folder)]
    assert outcomes and not _unclean(outcomes), "\n".join(_unclean(outcomes))
    bad = [f"[{s.verdict}{', lost' if s.lost else ''}] {s.label}: {s.detail}" for s in scenarios if s.verdict not in ("clear", "ok") or s.lost]
    assert scenarios and not bad, "\n".join(bad)
