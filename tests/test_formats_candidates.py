"""models.yaml validation: every rule rejects its bad input with one line naming the entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyplan.formats.candidates import (
    EarlyExit,
    NGram,
    NGramSimple,
    Quantize,
    base_chain,
    parse_candidates,
    read_candidates,
    supported_quantization,
)
from polyplan.formats.errors import PolyplanError


@pytest.fixture()
def folders(tmp_path: Path) -> Path:
    for name in ("big", "small"):
        (tmp_path / name).mkdir()
    return tmp_path


def good() -> list[dict]:
    return [
        {"name": "big", "source": "big", "target": True},
        {"name": "big-int8", "derive": {"from": "big", "quantize": "int8"}},
        {"name": "small", "source": "./small", "dtype": "float16"},
        {"name": "exit", "derive": {"from": "big", "layers": 2}},
        {"name": "exit-int8", "derive": {"from": "exit", "quantize": "int8"}},
        {"name": "ngram", "derive": {"kind": "ngram", "max_n": 4, "min_n": 2}},
        {"name": "zoo", "source": "builtin:drafter"},
        {"name": "hub", "source": "someorg/some-model"},
    ]


def parse(entries, base: Path):
    return parse_candidates({"candidates": entries}, base_dir=base, origin="m.yaml")


def test_valid_file_parses_into_frozen_candidates(folders):
    result = parse(good(), folders)
    names = [c.name for c in result.candidates]
    assert names[0] == "big" and result.target.is_target
    assert result.by_name("big-int8").derive == Quantize(base="big", kind="int8")
    assert result.by_name("exit").derive == EarlyExit(base="big", layers=2)
    assert result.by_name("ngram").derive == NGram(max_n=4, min_n=2)
    simple = parse([{"name": "t", "source": "builtin:target", "target": True}, {"name": "s", "derive": {"kind": "ngram-simple"}},
                    {"name": "s5", "derive": {"kind": "ngram-simple", "size_n": 5}}], folders)
    assert simple.by_name("s").derive == NGramSimple(size_n=3) and simple.by_name("s5").derive == NGramSimple(size_n=5)
    assert result.by_name("small").source == str(folders / "small")
    assert [result.by_name(n).source_kind for n in ("big", "zoo", "hub", "exit")] == ["local", "builtin", "hub", "derived"]
    assert result.by_name("small").dtype == "float16" and result.by_name("big").dtype == "float32"
    assert result.by_name("exit-int8").dtype == "float32"
    assert all(c.device == "cpu" for c in result.candidates)
    assert [c.name for c in base_chain(result, "exit-int8")] == ["exit-int8", "exit", "big"]
    with pytest.raises(AttributeError):
        result.target.name = "other"  # frozen


def test_target_is_listed_first_whatever_its_position(folders):
    entries = good()
    entries[0]["target"] = False
    entries[2]["target"] = True
    assert parse(entries, folders).target.name == "small"


def test_read_candidates_resolves_folders_relative_to_the_file(folders):
    (folders / "m.yaml").write_text("candidates:\n  - {name: a, source: big, target: true}\n")
    assert read_candidates(folders / "m.yaml").target.source == str(folders / "big")


def _edit(index: int, **changes) -> list[dict]:
    entries = good()
    entries[index] = {**entries[index], **changes}
    return entries


BAD = {
    "unknown key": (_edit(2, colour="red"), "candidate 'small': unknown key 'colour'"),
    "no target": (_edit(0, target=False), "no candidate has 'target: true'"),
    "two targets": (_edit(2, target=True), "candidate 'small': a second target"),
    "duplicate name": (good() + [{"name": "small", "source": "small"}], "candidate 'small': duplicate name"),
    "missing folder": (_edit(2, source="./nowhere"), "candidate 'small': source folder './nowhere' not found"),
    "unknown derive base": (
        _edit(1, derive={"from": "bigg", "quantize": "int8"}), "candidate 'big-int8': derive from unknown entry 'bigg'"
    ),
    "derive cycle": (
        good() + [{"name": "a", "derive": {"from": "b", "layers": 1}}, {"name": "b", "derive": {"from": "a", "layers": 1}}],
        "candidate 'a': derive cycle a -> b -> a",
    ),
    "int4 on cpu": (_edit(1, derive={"from": "big", "quantize": "int4"}), "candidate 'big-int8': quantize int4 on cpu"),
    "int8 head on cuda": (
        _edit(1, derive={"from": "big", "quantize": "bf16", "head": "int8"}, device="cuda"),
        "candidate 'big-int8': head int8 on cuda: dynamic int8 quantization has CPU kernels only",
    ),
    "head with int8-head": (
        _edit(1, derive={"from": "big", "quantize": "int8-head", "head": "int8"}),
        "candidate 'big-int8': derive: head: int8 goes with quantize int8 or bf16, not int8-head",
    ),
    "unknown head": (_edit(1, derive={"from": "big", "quantize": "int8", "head": "int4"}), "candidate 'big-int8': derive: head 'int4'"),
    "head without quantize": (
        _edit(3, derive={"from": "big", "layers": 1, "head": "int8"}), "candidate 'exit': derive: give exactly one of"
    ),
    "int8 on cuda": (_edit(1, device="cuda"), "candidate 'big-int8': quantize int8 on cuda"),
    "unknown quantization": (_edit(1, derive={"from": "big", "quantize": "int3"}), "candidate 'big-int8': derive: quantize 'int3'"),
    "layers zero": (_edit(3, derive={"from": "big", "layers": 0}), "candidate 'exit': derive: layers must be an integer >= 1"),
    "two operations": (
        _edit(3, derive={"from": "big", "layers": 1, "quantize": "int8"}), "candidate 'exit': derive: give exactly one of"
    ),
    "ngram bad n": (_edit(5, derive={"kind": "ngram", "max_n": 1, "min_n": 2}), "candidate 'ngram': derive: need integers"),
    "ngram unknown key": (_edit(5, derive={"kind": "ngram", "width": 3}), "candidate 'ngram': derive: unknown key 'width'"),
    "unknown kind": (_edit(5, derive={"kind": "medusa"}), "candidate 'ngram': derive: unknown kind 'medusa'"),
    "ngram-simple bad size": (_edit(5, derive={"kind": "ngram-simple", "size_n": 0}), "candidate 'ngram': derive: size_n: must be an integer >= 1"),
    "ngram-simple bool size": (_edit(5, derive={"kind": "ngram-simple", "size_n": True}), "candidate 'ngram': derive: size_n: must be"),
    "ngram-simple unknown key": (_edit(5, derive={"kind": "ngram-simple", "max_n": 3}),
                                 "candidate 'ngram': derive: unknown key 'max_n' for kind ngram-simple (allowed: size_n)"),
    "derive from ngram-simple": (
        good() + [{"name": "s", "derive": {"kind": "ngram-simple"}}, {"name": "q", "derive": {"from": "s", "quantize": "int8"}}],
        "candidate 'q': cannot derive from the n-gram drafter 's'",
    ),
    "source and derive": (_edit(2, derive={"kind": "ngram"}), "candidate 'small': give exactly one of 'source' and 'derive'"),
    "derived target": (
        [{**e, "target": False} for e in good()[:1]] + [{"name": "q", "derive": {"from": "big", "quantize": "int8"}, "target": True}],
        "candidate 'q': the target must have a 'source'",
    ),
    "dtype on a derived entry": (_edit(1, dtype="float16"), "candidate 'big-int8': 'dtype' and 'padded_vocab' belong to source entries"),
    "bad dtype": (_edit(2, dtype="float8"), "candidate 'small': dtype 'float8'"),
    "bad device": (_edit(2, device="tpu"), "candidate 'small': device 'tpu'"),
    "target not boolean": (_edit(0, target="yes"), "candidate 'big': 'target' must be true or false"),
    "missing name": ([{"source": "big", "target": True}], "candidates[0]: missing 'name'"),
    "derive from ngram": (
        good() + [{"name": "q", "derive": {"from": "ngram", "layers": 1}}], "candidate 'q': cannot derive from the n-gram drafter"
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_bad_entry_gets_one_line_naming_it(case, folders):
    entries, expected = BAD[case]
    with pytest.raises(PolyplanError) as raised:
        parse(entries, folders)
    message = str(raised.value)
    assert expected in message
    assert "\n" not in message


@pytest.mark.parametrize("data", [None, [], {"models": []}, {"candidates": []}, {"candidates": {"a": 1}}, {"candidates": [], "x": 1}])
def test_bad_top_level_is_rejected(data, folders):
    with pytest.raises(PolyplanError, match="m.yaml"):
        parse_candidates(data, base_dir=folders, origin="m.yaml")


def test_invalid_yaml_and_missing_file(folders):
    (folders / "bad.yaml").write_text("candidates: [\n")
    with pytest.raises(PolyplanError, match="not valid YAML"):
        read_candidates(folders / "bad.yaml")
    with pytest.raises(PolyplanError, match="not found"):
        read_candidates(folders / "absent.yaml")


def test_derived_entries_inherit_their_base_device(folders):
    entries = [
        {"name": "big", "source": "big", "target": True, "device": "cuda:1", "dtype": "bfloat16"},
        {"name": "exit", "derive": {"from": "big", "layers": 1}},
        {"name": "ngram", "derive": {"kind": "ngram"}},
    ]
    result = parse(entries, folders)
    assert result.by_name("exit").device == "cuda:1" and result.by_name("exit").dtype == "bfloat16"
    assert result.by_name("ngram").device == "cpu"


def test_fast_kernel_table():
    assert supported_quantization("int8", "cpu") is None
    assert supported_quantization("bf16", "cuda:0") is None
    assert supported_quantization("bf16", "cpu") is None  # models.derive asks the CPU when the copy is made
    assert "int4" in supported_quantization("int4", "cpu")
    assert supported_quantization("int8", "cuda") is not None


def test_the_default_candidates_ship_inside_the_package():
    """`pip install .` then `polyplan demo` from any folder: the default models.yaml is package data."""
    from pathlib import Path

    import polyplan
    from polyplan.formats.candidates import default_candidates_path, read_candidates

    path = default_candidates_path()
    assert path.is_relative_to(Path(polyplan.__file__).parent)
    assert read_candidates(path).target.name == "target"
