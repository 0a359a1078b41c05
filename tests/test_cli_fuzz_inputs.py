"""Property-based: mutated models.yaml, profile and plan files never produce a traceback.

Hypothesis takes the shipped examples (examples/zoo.yaml, polyplan/data/paper_table1_profile.json
and a plan `recommend` makes from it), replaces one value anywhere in them with a hostile one
(wrong type, NaN, 10^400, deep nesting, a key removed or added), or damages the bytes, and runs
the command that reads the file in-process. The property: exit 0, or exit 2 with exactly one
`error:` line on stderr. No model is loaded: the paths stop at the file checks (the paper
profile's models are not real, and its plan records no models.yaml).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import shipped_paper_profile
from polyplan.cli.app import app

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# Per property; each example is one in-process command (milliseconds). The default run is
# derandomized (the same 40 examples every time); POLYPLAN_FUZZ_EXAMPLES=400 explores afresh.
EXAMPLES_COUNT = int(os.environ.get("POLYPLAN_FUZZ_EXAMPLES", "40"))

HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([10**400, -1, 0, 1, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e307, -0.0, 1e-100, 5e-324]),
    st.text(max_size=8),
    st.sampled_from(["", "greedy", "t1.0", "cuda", "tpu9", "builtin:", "../../etc/passwd"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.integers(min_value=70, max_value=300).map(lambda depth: json.loads("[" * depth + "]" * depth)),
)


def _places(value, path=()):
    """Every (container, key) in a parsed JSON/YAML value, in a stable order."""
    if isinstance(value, dict):
        for key in value:
            yield path, key
            yield from _places(value[key], path + (key,))
    elif isinstance(value, list):
        for index in range(len(value)):
            yield path, index
            yield from _places(value[index], path + (index,))


def _at(value, path):
    for key in path:
        value = value[key]
    return value


@st.composite
def mutated(draw, original):
    """`original` (parsed) with one value replaced, one key removed, or one key added."""
    value = json.loads(json.dumps(original))
    places = list(_places(value))
    path, key = draw(st.sampled_from(places))
    container = _at(value, path)
    action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
    if action == "replace":
        container[key] = draw(HOSTILE)
    elif action == "delete":
        del container[key]
    elif isinstance(container, dict):
        container[draw(st.sampled_from(["extra", "name", "k", "alpha", "chain"]))] = draw(HOSTILE)
    else:
        container.append(draw(HOSTILE))
    return value


@st.composite
def damaged_bytes(draw, data: bytes):
    """`data` cut short, or with a few bytes overwritten (invalid UTF-8 included)."""
    if draw(st.booleans()):
        return data[: draw(st.integers(0, len(data)))]
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


def _hostile_copy(data, source: Path, path: Path, parse, dump) -> Path:
    """Write to `path` a copy of `source` with one value mutated, or with damaged bytes."""
    if data.draw(st.booleans()):
        path.write_text(dump(data.draw(mutated(parse(source.read_text())))))
    else:
        path.write_bytes(data.draw(damaged_bytes(source.read_bytes())))
    return path


def _one_clear_line_or_success(result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if result.exit_code == 0:
        return
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fuzz")
    shutil.copy(shipped_paper_profile(), root / "profile.json")
    result = CliRunner().invoke(app, ["recommend", "--profile", str(root / "profile.json"), "--out", str(root / "plan.json")])
    assert result.exit_code == 0, result.output
    return root


def _invoke(*args) -> object:
    return CliRunner().invoke(app, [str(arg) for arg in args])


FUZZ = settings(max_examples=EXAMPLES_COUNT, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], derandomize="POLYPLAN_FUZZ_EXAMPLES" not in os.environ)


@FUZZ
@given(data=st.data())
def test_a_mutated_profile_plans_or_fails_with_one_line(folder, data):
    path = _hostile_copy(data, folder / "profile.json", folder / "mutated-profile.json", json.loads, json.dumps)
    _one_clear_line_or_success(_invoke("recommend", "--profile", path, "--out", folder / "mutated-plan.json"))


@FUZZ
@given(data=st.data())
def test_a_mutated_plan_is_refused_with_one_line(folder, data):
    path = _hostile_copy(data, folder / "plan.json", folder / "mutated-plan-in.json", json.loads, json.dumps)
    # The plan records no models.yaml, so even an intact plan stops before loading a model.
    result = _invoke("validate", "--plan", path, "--out", folder / "report")
    _one_clear_line_or_success(result)
    assert result.exit_code == 2


@FUZZ
@given(data=st.data())
def test_a_mutated_models_yaml_is_refused_with_one_line(folder, data):
    path = _hostile_copy(data, EXAMPLES / "zoo.yaml", folder / "models.yaml", yaml.safe_load, yaml.safe_dump)
    # The plan's models (the paper's) are in no models.yaml: refused before any model loads.
    result = _invoke("validate", "--plan", folder / "plan.json", "--candidates", path, "--out", folder / "report")
    _one_clear_line_or_success(result)
    assert result.exit_code == 2
