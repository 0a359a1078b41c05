"""llama.cpp members (`decoder.llama_cpp.LlamaCppMember`), on a tiny GGUF the tests write.

What is checked: the member's greedy decode equals llama.cpp's own greedy decode of the same
file; `crop` then `forward` gives the logits of a fresh decode with the same batch shapes (bit
for bit: llama.cpp's numerics depend on how tokens are batched, not on the cache's history);
the logits are the model's (the torch copy of the same weights, within float rounding); a chain
with a llama.cpp target and a torch drafter is greedy-equal to the target alone and samples the
target's distribution (chi-square at ALPHA, with a negative control that must fail at the same
sample size); `forward_argmax` is the argmax of `forward`'s rows (ties to the lowest id, padding
skipped), and a greedy chain calls it instead of copying rows while sampling still copies them;
models.yaml's `engine: llama.cpp` entries and their llama.cpp-quantized copies load
through the one loader; bad input is one line and exit 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from polyplan.cli.app import app
from polyplan.decoder import verify as verify_module
from polyplan.decoder.chain import generate
from polyplan.decoder.hf import HFMember
from polyplan.decoder.member import ConfidentArgmax
from polyplan.decoder.sampling import Sampling, top_probability
from polyplan.formats.plan import DraftPolicy
from polyplan.formats.candidates import parse_candidates
from polyplan.formats.errors import PolyplanError
from polyplan.models.loader import load_candidates
from tiny_gguf import write_tiny_gguf

llama_cpp = pytest.importorskip("llama_cpp")
from polyplan.decoder.llama_cpp import LlamaCppMember  # noqa: E402 - after the skip

pytestmark = pytest.mark.usefixtures("single_thread")

PROMPT = [5, 9, 33, 70, 101]
ALPHA = 0.001
SAMPLES = 1_500  # two-token samples; the negative control's p-value is far below ALPHA at this size
TOP_K = 3  # 9 cells in the joint of the first two tokens


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny GGUF file, the float32 torch model it holds, and a second tiny model (another seed)
    with the same vocabulary to draft for it."""
    from conftest import tiny_llama

    folder = tmp_path_factory.mktemp("llama_cpp")
    model = write_tiny_gguf(folder / "tiny.gguf")
    drafter = tiny_llama(1, layers=1, hidden=32, vocab=model.config.vocab_size)
    return folder / "tiny.gguf", model, drafter


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYPLAN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def greedy_ids(member, prompt, steps):
    member.reset()
    logits = member.forward(torch.tensor(prompt), keep_last=1)
    ids = []
    for _ in range(steps):
        ids.append(int(logits[-1].argmax()))
        logits = member.forward(torch.tensor(ids[-1:]), keep_last=1)
    return ids


def test_greedy_decode_equals_llama_cpp_own_greedy(tiny):
    path, _, _ = tiny
    member = LlamaCppMember(path, context=256)
    ours = greedy_ids(member, PROMPT, 24)
    reference = llama_cpp.Llama(str(path), n_ctx=256, n_threads=1, verbose=False)
    theirs = []
    for token in reference.generate(PROMPT, top_k=1, temp=0.0, reset=True):
        theirs.append(token)
        if len(theirs) == len(ours):
            break
    assert ours == theirs


def test_crop_then_forward_gives_a_fresh_decode(tiny):
    path, _, _ = tiny
    member = LlamaCppMember(path, context=256)
    sequence = PROMPT + [7, 8, 9, 10, 11, 12]
    member.forward(torch.tensor(sequence[:7]), keep_last=1)
    fresh = member.forward(torch.tensor(sequence[7:]))  # (4, vocab)
    member.forward(torch.tensor([40, 41, 42]))  # drafts that get rejected
    member.crop(7)
    assert member.cache_length == 7
    again = member.forward(torch.tensor(sequence[7:]))
    assert torch.equal(again, fresh)
    member.reset()
    assert member.cache_length == 0
    member.forward(torch.tensor(sequence[:7]), keep_last=1)
    assert torch.equal(member.forward(torch.tensor(sequence[7:])), fresh)


def test_logits_are_the_models_and_only_the_rows_asked_for(tiny):
    path, model, _ = tiny
    member = LlamaCppMember(path, context=256, batch=4)  # a 9-token input takes three decodes
    sequence = torch.tensor(PROMPT + [7, 8, 9, 10])
    rows = member.forward(sequence, keep_last=6)
    assert rows.shape == (6, member.vocab_size) and rows.dtype == torch.float32
    with torch.no_grad():
        expected = model(sequence.unsqueeze(0)).logits[0, -6:]
    assert torch.allclose(rows, expected, atol=2e-2), (rows - expected).abs().max()
    assert member.forward(torch.tensor([3]), keep_last=1).shape == (1, member.vocab_size)


@pytest.mark.parametrize("which", ["same weights in torch", "another model"])
def test_a_chain_with_a_llama_cpp_target_and_a_torch_drafter_is_greedy_equal(tiny, which):
    path, model, other = tiny
    drafter = model if which == "same weights in torch" else other
    target = LlamaCppMember(path, context=256)
    alone = greedy_ids(target, PROMPT, 20)
    result = generate([target, HFMember(drafter)], PROMPT, max_new_tokens=20, block_sizes=[3], sampling=Sampling(0.0))
    assert list(result.token_ids) == alone
    if which == "same weights in torch":
        assert result.levels[0].forward_passes < 10  # it verified drafts, not one token a pass


def test_forward_argmax_is_the_argmax_of_forwards_rows(tiny):
    path, _, _ = tiny
    member = LlamaCppMember(path, context=256, batch=4)  # a 9-token input takes three decodes
    sequence = torch.tensor(PROMPT + [7, 8, 9, 10])
    rows = member.forward(sequence, keep_last=6)
    member.reset()
    ids = member.forward_argmax(sequence, keep_last=6)
    assert ids.dtype == torch.int64 and ids.shape == (6,) and member.cache_length == 9
    assert torch.equal(ids, rows.argmax(dim=-1))
    step = member.forward_argmax(torch.tensor([3]), keep_last=1)
    member.crop(9)
    assert torch.equal(step, member.forward(torch.tensor([3]), keep_last=1).argmax(dim=-1))


def test_forward_argmax_confidence_is_the_argmax_and_softmax_top_of_forwards_rows(tiny):
    """The confidence a p_min stop reads (`ConfidentArgmax`): taken on the buffer, the same as
    `decoder.sampling.top_probability` of the copied rows."""
    path, _, _ = tiny
    member = LlamaCppMember(path, context=256, batch=4)
    sequence = torch.tensor(PROMPT + [7, 8, 9, 10])
    rows = member.forward(sequence, keep_last=6)
    member.reset()
    ids, top = member.forward_argmax_confidence(sequence, keep_last=6)
    assert isinstance(member, ConfidentArgmax) and ids.dtype == torch.int64 and top.shape == (6,)
    assert torch.equal(ids, rows.argmax(dim=-1))
    assert torch.allclose(top, top_probability(rows), atol=1e-6)
    policy = DraftPolicy(p_min=0.2)
    alone = greedy_ids(member, PROMPT, 16)
    result = generate([member, LlamaCppMember(path, context=256)], PROMPT, max_new_tokens=16, block_sizes=[3],
                      draft_policy=policy)
    assert list(result.token_ids) == alone


def test_forward_argmax_breaks_ties_to_the_lowest_id_and_skips_padding(tiny, monkeypatch):
    path, _, _ = tiny
    member = LlamaCppMember(path, context=256)
    vocab = member.vocab_size
    buffer = np.zeros((2, vocab), dtype=np.float32)  # stands in for llama.cpp's logits buffer
    buffer[0, [40, 7, 300]] = 5.0  # a three-way tie: id 7
    buffer[1, [12, 99]] = 3.0  # a tie below a padded id's larger logit: id 12
    buffer[1, vocab - 1] = 9.0
    monkeypatch.setattr(member, "_view", lambda rows: buffer[-rows:])
    member.valid_vocab_size = vocab - 1
    assert member.forward_argmax(torch.tensor(PROMPT), keep_last=2).tolist() == [7, 12]
    member.reset()
    assert member.forward(torch.tensor(PROMPT), keep_last=2)[:, : vocab - 1].argmax(dim=-1).tolist() == [7, 12]


def spy(monkeypatch, name: str) -> list[int]:
    """Count calls of `LlamaCppMember.<name>` (one entry per call)."""
    calls, original = [], getattr(LlamaCppMember, name)

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(LlamaCppMember, name, counted)
    return calls


def test_a_greedy_chain_takes_llama_cpps_argmax_and_copies_no_rows(tiny, monkeypatch):
    from test_decoder_argmax_forward import Plain

    path, _, _ = tiny
    target, copy = LlamaCppMember(path, context=256), LlamaCppMember(path, context=256, name="copy")
    alone = greedy_ids(target, PROMPT, 20)
    without = generate([Plain(target), Plain(copy)], PROMPT, max_new_tokens=20, block_sizes=[3], sampling=Sampling(0.0))
    forward, argmax = spy(monkeypatch, "forward"), spy(monkeypatch, "forward_argmax")
    result = generate([target, copy], PROMPT, max_new_tokens=20, block_sizes=[3], sampling=Sampling(0.0))
    assert list(result.token_ids) == list(without.token_ids) == alone
    assert not forward and len(argmax) == sum(level.forward_passes for level in result.levels)


def test_sampling_at_a_temperature_still_copies_rows_and_is_unchanged(tiny, monkeypatch):
    from test_decoder_argmax_forward import Plain

    path, _, drafter = tiny
    target = LlamaCppMember(path, context=256)
    sampling = Sampling(1.0, top_k=TOP_K)
    before = generate([Plain(target), HFMember(drafter)], PROMPT, max_new_tokens=12, block_sizes=[3], sampling=sampling,
                      generator=torch.Generator().manual_seed(5))
    forward, argmax = spy(monkeypatch, "forward"), spy(monkeypatch, "forward_argmax")
    after = generate([target, HFMember(drafter)], PROMPT, max_new_tokens=12, block_sizes=[3], sampling=sampling,
                     generator=torch.Generator().manual_seed(5))
    assert after.token_ids == before.token_ids
    assert forward and not argmax


def target_joint(target: LlamaCppMember, sampling: Sampling) -> np.ndarray:
    """P(x1, x2 | PROMPT) under the llama.cpp target with top-k, from its own logits."""

    def probs(context):
        target.reset()
        logits = target.forward(torch.tensor(context), keep_last=1)[0].double() / sampling.temperature
        kth = torch.topk(logits, sampling.top_k).values[-1]
        return torch.softmax(logits.masked_fill(logits < kth, -torch.inf), -1).numpy()

    first = probs(PROMPT)
    joint = np.zeros((target.vocab_size, target.vocab_size))
    for x1 in np.flatnonzero(first):
        joint[x1] = first[x1] * probs(PROMPT + [int(x1)])
    return joint


def joint_pvalue(chain, sampling, seed) -> float:
    from scipy import stats

    generator = torch.Generator().manual_seed(seed)
    counts: dict[tuple[int, int], int] = {}
    for _ in range(SAMPLES):
        ids = generate(chain, PROMPT, max_new_tokens=2, block_sizes=[2], sampling=sampling, generator=generator).token_ids
        counts[tuple(ids)] = counts.get(tuple(ids), 0) + 1
    joint = target_joint(chain[0], sampling)
    cells = list(zip(*np.nonzero(joint)))
    if any(cell not in {tuple(map(np.int64, c)) for c in cells} for cell in counts):
        return 0.0  # a sample the target cannot produce
    observed = np.array([counts.get((int(a), int(b)), 0) for a, b in cells])
    expected = np.array([joint[a, b] for a, b in cells]) * SAMPLES
    return float(stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue)


def test_a_mixed_chain_samples_the_llama_cpp_targets_distribution(tiny):
    path, _, drafter = tiny
    chain = [LlamaCppMember(path, context=256), HFMember(drafter)]
    assert joint_pvalue(chain, Sampling(1.0, top_k=TOP_K), seed=0) > ALPHA


def test_negative_control_a_verifier_that_always_accepts_fails(tiny, monkeypatch):
    monkeypatch.setattr(verify_module, "acceptance_probability", lambda p, q: torch.ones_like(q))
    path, _, drafter = tiny
    chain = [LlamaCppMember(path, context=256), HFMember(drafter)]
    assert joint_pvalue(chain, Sampling(1.0, top_k=TOP_K), seed=0) < ALPHA


def entries(path: Path, **target):
    return [{"name": "tiny", "source": str(path), "engine": "llama.cpp", "target": True, **target},
            {"name": "tiny-q8", "derive": {"from": "tiny", "quantize": "q8_0"}},
            {"name": "tiny-torch", "source": str(path)},
            {"name": "ngram", "derive": {"kind": "ngram"}}]


def test_models_yaml_llama_cpp_entries_load_and_mix_with_torch(tiny, cache, tmp_path):
    path, _, _ = tiny
    loaded = load_candidates(parse_candidates({"candidates": entries(path)}, base_dir=tmp_path, origin="m.yaml"))
    assert loaded.compatible, loaded.compatibility
    target, copy, torch_copy, ngram = loaded.chain(["tiny", "tiny-q8", "tiny-torch", "ngram"])
    assert isinstance(target, LlamaCppMember) and isinstance(copy, LlamaCppMember) and isinstance(torch_copy, HFMember)
    assert copy.path.parent == cache / "llama.cpp" and "Q8_0" in copy.info.description
    assert target.token_map() == torch_copy.token_map()
    alone = greedy_ids(target, PROMPT, 12)
    result = generate([target, copy, ngram], PROMPT, max_new_tokens=12, block_sizes=[3, 2], sampling=Sampling(0.0))
    assert list(result.token_ids) == alone
    again = load_candidates(parse_candidates({"candidates": entries(path)[:2]}, base_dir=tmp_path, origin="m.yaml"))
    assert again.member("tiny-q8").path == copy.path  # the quantized copy is made once


def test_a_llama_cpp_target_with_ngram_simple_drafts_only_where_it_repeats_and_stays_greedy_exact(tiny, tmp_path):
    path, _, _ = tiny
    candidates = [entries(path)[0], {"name": "lookup", "derive": {"kind": "ngram-simple", "size_n": 1}}]
    loaded = load_candidates(parse_candidates({"candidates": candidates}, base_dir=tmp_path, origin="m.yaml"))
    target, lookup = loaded.chain(["tiny", "lookup"])
    looping = PROMPT * 3
    alone = greedy_ids(target, looping, 16)
    result = generate([target, lookup], looping, max_new_tokens=16, block_sizes=[4], sampling=Sampling(0.0))
    assert list(result.token_ids) == alone
    assert result.levels[0].tokens_drafted > 0 and result.levels[1].forward_passes == result.levels[0].verifications


def test_the_fingerprint_names_the_engine_and_its_version(tiny, tmp_path):
    from polyplan.models.fingerprints import candidate_fingerprints

    path, _, _ = tiny
    llama = candidate_fingerprints(parse_candidates({"candidates": entries(path)[:1]}, base_dir=tmp_path))
    other_context = candidate_fingerprints(parse_candidates({"candidates": entries(path, context=128)[:1]}, base_dir=tmp_path))
    on_torch = candidate_fingerprints(parse_candidates({"candidates": [{"name": "tiny", "source": str(path), "target": True}]}, base_dir=tmp_path))
    assert len({llama["tiny"], other_context["tiny"], on_torch["tiny"]}) == 3


def write_yaml(tmp_path: Path, items) -> Path:
    import yaml

    file = tmp_path / "models.yaml"
    file.write_text(yaml.safe_dump({"candidates": items}), encoding="utf-8")
    return file


def one_line_exit_2(result, *fragments):
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output, result.output
    for fragment in fragments:
        assert fragment in result.output, result.output


def test_models_check_and_generate_on_llama_cpp_members(tiny, cache, tmp_path):
    path, _, _ = tiny
    file = write_yaml(tmp_path, entries(path))
    check = CliRunner().invoke(app, ["models", "check", "--candidates", str(file)])
    assert check.exit_code == 0, check.output
    assert "llama.cpp" in check.output and "requantized by llama.cpp to q8_0" in check.output
    run = CliRunner().invoke(app, ["generate", "--chain", "tiny,tiny-q8,ngram", "--candidates", str(file), "--block-sizes", "3,2",
                                   "--max-new-tokens", "8", "--raw-prompts", "--json", "def f(x):"])
    assert run.exit_code == 0, run.output


def test_bad_llama_cpp_input_is_one_line(tiny, cache, tmp_path, monkeypatch):
    path, _, _ = tiny
    runner = CliRunner()
    unknown = write_yaml(tmp_path, [entries(path)[0], {"name": "x", "derive": {"from": "tiny", "quantize": "int8"}}])
    one_line_exit_2(runner.invoke(app, ["models", "check", "--candidates", str(unknown)]), "'int8' is not a llama.cpp type")
    not_gguf = write_yaml(tmp_path, [{"name": "t", "source": "builtin:target", "engine": "llama.cpp", "target": True}])
    one_line_exit_2(runner.invoke(app, ["models", "check", "--candidates", str(not_gguf)]), "engine llama.cpp runs .gguf files")
    foreign = tmp_path / "foreign.gguf"
    write_tiny_gguf(foreign, architecture="notamodel")
    cannot = write_yaml(tmp_path, [{"name": "t", "source": str(foreign), "engine": "llama.cpp", "target": True}])
    one_line_exit_2(runner.invoke(app, ["models", "check", "--candidates", str(cannot)]), "candidate 't'")
    differs = write_yaml(tmp_path, [entries(path)[0], {"name": "d", "source": "builtin:drafter"}])
    one_line_exit_2(runner.invoke(app, ["generate", "--chain", "tiny,d", "--candidates", str(differs), "--raw-prompts", "def f(x):"]),
                    "differs from the target 'tiny'")
    short = write_yaml(tmp_path, entries(path, context=16)[:1])
    long_prompt = " ".join(["word"] * 40)
    one_line_exit_2(runner.invoke(app, ["generate", "--chain", "tiny", "--candidates", str(short), "--raw-prompts", long_prompt]))
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # the extra not installed
    one_line_exit_2(runner.invoke(app, ["models", "check", "--candidates", str(write_yaml(tmp_path, entries(path)[:1]))]),
                    "pip install -e '.[llama]'")


def test_a_member_refuses_more_tokens_than_its_context(tiny):
    path, _, _ = tiny
    member = LlamaCppMember(path, context=16)
    member.forward(torch.arange(10), keep_last=1)
    with pytest.raises(PolyplanError, match="exceed its llama.cpp context of 16"):
        member.forward(torch.arange(7))
