"""Instruct targets: prompts through the chat template (or raw), every EOS id stops a generation,
Spec-Bench categories become prompt kinds, and the bad cases are one line each."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from conftest import save_model, tiny_llama, tiny_tokenizer, write_candidate_workspace
from polyplan.cli.app import app
from polyplan.decoder import HFMember, Sampling, generate
from polyplan.decoder.chat import encode_prompt
from polyplan.decoder.member import stop_token_ids
from polyplan.formats.errors import PolyplanError
from polyplan.profiler.prompts import encode_prompts, read_prompt_file

TEMPLATE = "{% for m in messages %}<s> w5 {{ m['content'] }} w6{% endfor %}{% if add_generation_prompt %} w7{% endif %}"


def chat_tokenizer(template: str = TEMPLATE):
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = template
    return tokenizer


def test_prompt_goes_through_the_chat_template_unless_raw():
    tokenizer = chat_tokenizer()
    ids = tokenizer.convert_tokens_to_ids
    wrapped = encode_prompt(tokenizer, "w10 w11")
    assert wrapped == [ids("<s>"), ids("w5"), ids("w10"), ids("w11"), ids("w6"), ids("w7")]  # one user turn + generation prompt
    assert encode_prompt(tokenizer, "w10 w11", raw=True) == [ids("w10"), ids("w11")]
    assert encode_prompt(tiny_tokenizer(), "w10 w11") == [ids("w10"), ids("w11")]  # no template: raw text


@pytest.mark.parametrize("template", ["{% for m in messages %}{{ m['content'] }", "{{ raise_exception('no system role') }}"])
def test_a_template_that_fails_to_render_is_one_line(tmp_path, template):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"question_id": 1, "category": "writing", "turns": ["w9 w10"]}) + "\n")
    with pytest.raises(PolyplanError, match=r"^.*p\.jsonl:1: the target's chat template failed to render \(.*\); pass --raw-prompts") as raised:
        encode_prompts(read_prompt_file(path), chat_tokenizer(template))
    assert "\n" not in str(raised.value)
    assert encode_prompts(read_prompt_file(path), chat_tokenizer(template), raw=True)[0].ids  # the way out works


def test_spec_bench_category_is_the_prompt_kind(tmp_path):
    path = tmp_path / "question.jsonl"
    rows = [{"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Now shorter."]},
            {"question_id": 82, "category": "math", "turns": ["1 + 1?"]},
            {"question_id": 83, "turns": ["No category."]},
            "plain string"]
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    prompts = read_prompt_file(path)
    assert [(p.kind, p.text) for p in prompts] == [
        ("writing", "Write a poem."), ("math", "1 + 1?"), ("spec_bench", "No category."), ("user", "plain string")
    ]


def test_generation_stops_at_every_eos_id_of_the_generation_config(single_thread):
    model = tiny_llama(0, layers=2)
    prompt = [4, 9, 13, 21]
    free = generate([HFMember(model)], prompt, max_new_tokens=6)
    assert len(free.token_ids) == 6 and 2 not in free.token_ids[:3]
    stopper = free.token_ids[2]  # make the third greedy token an end-of-turn id
    model.generation_config.eos_token_id = [2, stopper]
    member = HFMember(model, tokenizer=tiny_tokenizer())
    assert stop_token_ids(member) == (2, stopper) and member.eos_token_id == 2
    stopped = generate([member], prompt, max_new_tokens=6, eos_token_id=stop_token_ids(member))
    assert stopped.token_ids == free.token_ids[: free.token_ids.index(stopper) + 1] and stopped.stopped_at_eos
    negative = generate([member], prompt, max_new_tokens=6, eos_token_id=member.eos_token_id)  # only the first id
    assert negative.token_ids == free.token_ids  # control: with one id the end-of-turn token does not stop it


def test_generate_cli_applies_the_template_and_raw_prompts_turns_it_off(tmp_path, single_thread):
    folder = save_model(tmp_path / "chat", tiny_llama(0, layers=2), chat_tokenizer())
    run = lambda *extra: CliRunner().invoke(app, ["generate", "w10 w11", "--chain", str(folder), "--max-new-tokens", "3", "--json", *extra])
    chat, raw = run(), run("--raw-prompts")
    assert chat.exit_code == 0 and raw.exit_code == 0, chat.output + raw.output
    model = tiny_llama(0, layers=2)
    expect = lambda ids: generate([HFMember(model)], ids, max_new_tokens=3, eos_token_id=2).token_ids
    tokenizer = chat_tokenizer()
    assert json.loads(chat.output)["token_ids"] == list(expect(encode_prompt(tokenizer, "w10 w11")))
    assert json.loads(raw.output)["token_ids"] == list(expect(encode_prompt(tokenizer, "w10 w11", raw=True)))
    broken = save_model(tmp_path / "broken", tiny_llama(0, layers=2), chat_tokenizer("{{ raise_exception('bad') }}"))
    failed = CliRunner().invoke(app, ["generate", "w10", "--chain", str(broken), "--max-new-tokens", "2"])
    assert failed.exit_code == 2 and failed.output.startswith("error: prompt: the target's chat template failed to render")


def test_profile_cli_bad_inputs_are_one_line_and_keep_the_profile(tmp_path, single_thread):
    root = write_candidate_workspace(tmp_path)
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"category": "qa", "turns": [" ".join(["w9"] * 300)]}) + "\n")
    out = root / "profile.json"
    out.write_text("keep me")  # stands for work already measured: a failing run must not touch it
    common = ["profile", "--candidates", str(root / "models.yaml"), "--out", str(out), "--threads", "1"]
    too_long = CliRunner().invoke(app, [*common, "--prompts", str(long)])
    assert too_long.exit_code == 2 and "long.jsonl:1: prompt of 300 tokens" in too_long.output and "context" in too_long.output
    save_model(root / "odd", tiny_llama(5, layers=1), tiny_tokenizer(swap=(5, 6)))
    (root / "odd.yaml").write_text(
        "candidates:\n  - {name: target, source: ./target, target: true}\n  - {name: odd, source: ./odd}\n"
    )
    odd = CliRunner().invoke(app, ["profile", "--candidates", str(root / "odd.yaml"), "--out", str(out), "--threads", "1"])
    assert odd.exit_code == 2 and "candidate 'odd': tokenizer differs from the target 'target'" in odd.output
    for result in (too_long, odd):
        assert "Traceback" not in result.output and result.output.strip().count("\n") == 0
    assert out.read_text() == "keep me"


def test_demo_splits_a_prompt_file_alternately_between_profiling_and_validation(tmp_path):
    from polyplan.pipeline.demo import DemoSettings, demo_prompt_sets

    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps({"category": c, "turns": [f"w{i + 4}"]}) for i, c in enumerate("aabbc")) + "\n")
    profiling, held_out = demo_prompt_sets(DemoSettings(prompts=path, raw_prompts=True))
    assert [p.text for p in profiling.prompts] == ["w4", "w6", "w8"] and [p.text for p in held_out.prompts] == ["w5", "w7"]
    assert [p.kind for p in profiling.prompts] == ["a", "b", "c"] and profiling.raw and held_out.raw
    assert not profiling.truncate and "held out" in held_out.source
    path.write_text(json.dumps("only one") + "\n")
    with pytest.raises(PolyplanError, match=r"q\.jsonl: the demo needs at least 2 prompts"):
        demo_prompt_sets(DemoSettings(prompts=path))


def test_prompt_sets_carry_the_raw_choice_to_encoding(tmp_path):
    from polyplan.profiler.prompt_sets import encode_for, prompt_set

    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"category": "qa", "turns": ["w10 w11"]}) + "\n")
    tokenizer = chat_tokenizer()
    wrapped, raw = encode_for(prompt_set(path), tokenizer), encode_for(prompt_set(path, raw=True), tokenizer)
    assert wrapped[0].ids == tuple(encode_prompt(tokenizer, "w10 w11")) and len(wrapped[0].ids) == 6
    assert raw[0].ids == tuple(encode_prompt(tokenizer, "w10 w11", raw=True)) and wrapped[0].prompt.kind == "qa"
