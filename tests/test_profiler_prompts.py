"""Prompt sets: the built-in held-out snippets, user text/JSONL/Spec-Bench files, bad files."""

from __future__ import annotations

import json

import pytest

from conftest import tiny_tokenizer
from polyplan.formats.errors import PolyplanError
from polyplan.profiler.prompts import KINDS, EncodedPrompt, Prompt, builtin_prompts, check_fits, encode_prompts, read_prompt_file
from polyplan.models.corpus import split_stdlib


@pytest.fixture(scope="module")
def builtin() -> tuple[Prompt, ...]:
    return builtin_prompts()


def test_builtin_set_is_deterministic_varied_and_held_out(builtin):
    assert builtin == builtin_prompts()
    assert len(builtin) == 4 * len(KINDS)
    assert [p.kind for p in builtin[: len(KINDS)]] == list(KINDS)  # kinds interleaved
    held_out = set(split_stdlib().validation)
    for prompt in builtin:
        assert prompt.source.startswith("stdlib:")
        assert prompt.source[len("stdlib:") :].rsplit(":", 1)[0] in held_out
        assert prompt.text.strip()
    for kind in KINDS:
        files = [p.source.rsplit(":", 1)[0] for p in builtin if p.kind == kind]
        assert len(set(files)) == len(files)  # one prompt per file and kind


def test_builtin_kinds_end_where_the_model_should_continue(builtin):
    for prompt in builtin:
        if prompt.kind == "docstring":
            assert prompt.text.endswith('"""')
        if prompt.kind == "repetitive_edit":
            header = prompt.text.rsplit("\n\n", 1)[1]
            assert header.startswith(("def ", "async def ")) and "_v2(" in header
            original = header.replace("_v2(", "(", 1).split("(")[0]
            assert original + "(" in prompt.text.split("\n\n")[0]
        if prompt.kind == "long_context":
            assert len(prompt.text) >= 1400 and prompt.text.endswith("\n")
    assert builtin_prompts(1) == tuple(p for p in builtin[: len(KINDS)])


def test_text_file_blocks_are_separated_by_blank_lines(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("def f(x):\n    return x\n\n\n   \nclass A:\n    pass\n\nlast one")
    prompts = read_prompt_file(path)
    assert [p.text for p in prompts] == ["def f(x):\n    return x", "class A:\n    pass", "last one"]
    assert [p.source for p in prompts] == [f"{path}:1", f"{path}:6", f"{path}:9"]


def test_jsonl_strings_objects_and_spec_bench_turns(tmp_path):
    path = tmp_path / "question.jsonl"
    rows = [
        {"question_id": 81, "category": "writing", "turns": ["Compose a blog post.", "Rewrite it in rhymes."]},
        "a bare string prompt",
        {"prompt": "def add(a, b):\n\n    return"},
        {"text": "   "},  # blank: skipped
    ]
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n\n")
    prompts = read_prompt_file(path)
    assert [p.text for p in prompts] == ["Compose a blog post.", "a bare string prompt", "def add(a, b):\n\n    return"]
    assert prompts[0].kind == "writing" and prompts[0].source == f"{path}:1"


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.txt", "", r"empty.txt: no prompts \(the file is empty\)$"),
        ("blank.txt", "\n   \n\n", r"blank.txt: no prompts \(the file is empty\)$"),
        ("blank.jsonl", '"  "\n{"text": ""}\n', r"blank.jsonl: no prompts \(every entry is blank\)$"),
        ("bad.jsonl", '"ok"\n{"turns": \n', r"bad.jsonl:2: not valid JSON"),
        ("turns.jsonl", '{"turns": []}\n', r"turns.jsonl:1: 'turns' must be a non-empty list of strings$"),
        ("number.jsonl", "42\n", r"number.jsonl:1: expected a JSON string or an object with 'turns', 'prompt' or 'text'$"),
    ],
)
def test_bad_prompt_files_get_one_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(PolyplanError, match=message) as caught:
        read_prompt_file(path)
    assert "\n" not in str(caught.value)


def test_missing_file_and_encoding(tmp_path):
    with pytest.raises(PolyplanError, match=r"nope.txt: no such prompt file$"):
        read_prompt_file(tmp_path / "nope.txt")
    tokenizer = tiny_tokenizer()
    encoded = encode_prompts([Prompt("w5 w6 w7", "user", "a:1")], tokenizer)
    assert encoded[0].ids == (5, 6, 7)
    with pytest.raises(PolyplanError, match=r"^b:2: the prompt encodes to no tokens$"):
        encode_prompts([Prompt("", "user", "b:2")], tokenizer)


def test_check_fits_names_the_prompt_and_the_model():
    prompts = [EncodedPrompt(Prompt("", "user", "p.txt:1"), tuple(range(10)))]
    check_fits(prompts, "m", None, 1000)
    check_fits(prompts, "m", 20, 10)
    with pytest.raises(PolyplanError, match=r"^p.txt:1: prompt of 10 tokens is longer than the context of 'm' \(8 tokens\)$"):
        check_fits(prompts, "m", 8, 0)
    with pytest.raises(PolyplanError, match=r"^p.txt:1: prompt of 10 tokens \+ 11 generated/drafted tokens does not fit"):
        check_fits(prompts, "m", 20, 11)
