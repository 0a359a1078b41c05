"""Reduced-vocabulary llama.cpp members (`models.llama_vocab`, `decoder.llama_cpp_subset`): a
GGUF copy whose head covers a subset S of the token ids, read through input embeddings.

What is checked, on the tiny GGUF the tests write (and its llama.cpp q8_0 copy, so that the
embedding rows are dequantized from a quantized tensor): the copy's head and token tensors have
N rows and every other tensor is the base's, byte for byte; the member returns full-vocabulary
logits, −inf outside S, equal on S to the full model's for a context that holds ids outside S
(a negative control: reading those ids as another token changes the logits); a greedy chain
with the reduced drafter equals the target alone and its drafts are accepted; a chain target ←
reduced member samples the target's joint of two tokens (chi-square at ALPHA, top-k 3 at
temperature 1, S without the target's most likely tokens), and restricting the VERIFIER to S
instead fails at the same sample size; models.yaml's `derive: {vocab: N}` and `vocab: ids.json`
load through the loader (cached, end and control ids always kept); bad input is one line.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from polyplan.cli.app import app
from polyplan.decoder.chain import generate
from polyplan.decoder.sampling import Sampling
from polyplan.formats.candidates import ReducedVocab, parse_candidates
from polyplan.formats.errors import PolyplanError
from polyplan.formats.gguf_header import read_header
from polyplan.models.loader import load_candidates
from tiny_gguf import write_tiny_gguf

llama_cpp = pytest.importorskip("llama_cpp")
from polyplan.decoder.llama_cpp import LlamaCppMember  # noqa: E402 - after the skip
from polyplan.models import llama_vocab  # noqa: E402
from polyplan.models.llama_quantize import quantized_copy  # noqa: E402
from test_decoder_llama_cpp import ALPHA, PROMPT, SAMPLES, TOP_K, greedy_ids, one_line_exit_2, target_joint, write_yaml  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_thread")

SMALL_CORPUS = 20_000  # characters of the standard library counted for `vocab: N` in these tests


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny GGUF file, its llama.cpp q8_0 copy, and the cache they and the reduced copies live in."""
    folder = tmp_path_factory.mktemp("llama_cpp_subset")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("POLYPLAN_CACHE_DIR", str(folder / "cache"))
        write_tiny_gguf(folder / "tiny.gguf")
        yield folder / "tiny.gguf", quantized_copy(folder / "tiny.gguf", "q8_0")


@pytest.fixture
def small_corpus(monkeypatch):
    monkeypatch.setattr(llama_vocab, "CORPUS_CODE_CHARS", SMALL_CORPUS)
    monkeypatch.setattr(llama_vocab, "CORPUS_PROSE_CHARS", SMALL_CORPUS)


def reduced_member(base: Path, ids: list[int], folder: Path, **options) -> LlamaCppMember:
    """The llama.cpp member of `base` cut to `ids` (and its end and control ids)."""
    file = folder / f"ids-{len(ids)}-{ids[0]}.json"
    file.write_text(json.dumps(ids), encoding="utf-8")
    reduced = llama_vocab.reduced_vocab_copy(base, ReducedVocab("base", ids=str(file)), tokenizer=None)
    return LlamaCppMember(reduced, subset=llama_vocab.vocab_subset(reduced, base), context=256, **options)


def test_the_copy_cuts_the_head_and_copies_every_other_tensor(tiny, tmp_path):
    path, _ = tiny
    member = reduced_member(path, list(range(0, 2050, 7)), tmp_path)
    base, cut = read_header(path), read_header(member.path)
    n = member.subset.keep.numel()
    assert {0, 2048, 2049} <= set(member.subset.keep.tolist())  # BOS/EOS, <|user|> (control) and <|end|> (end of turn)
    assert cut.metadata["tokenizer.ggml.model"] == "none" and cut.metadata["llama.vocab_size"] == n
    assert member.eos_token_ids == LlamaCppMember(path).eos_token_ids == (0, 2049)
    with open(path, "rb") as full_file, open(member.path, "rb") as cut_file:
        for old, new in zip(base.tensor_table, cut.tensor_table):
            assert old.name == new.name
            full_file.seek(base.data_start + old.offset)
            cut_file.seek(cut.data_start + new.offset)
            if old.name in ("token_embd.weight", "output.weight"):
                assert new.shape == (old.shape[0], n)
                rows = np.frombuffer(full_file.read(old.nbytes), np.float32).reshape(old.shape[1], -1)
                assert np.array_equal(np.frombuffer(cut_file.read(new.nbytes), np.float32).reshape(n, -1), rows[member.subset.keep])
            else:
                assert new.shape == old.shape and full_file.read(old.nbytes) == cut_file.read(new.nbytes)


@pytest.mark.parametrize("which", ["float32", "q8_0"])
def test_logits_on_the_subset_are_the_full_models_and_outside_it_minus_infinity(tiny, tmp_path, which):
    path = tiny[0] if which == "float32" else tiny[1]
    full = LlamaCppMember(path, context=256)
    reduced = reduced_member(path, list(range(0, 2050, 3)), tmp_path)
    keep = reduced.subset.keep
    sequence = torch.tensor(PROMPT + [7, 8, 10, 11, 13, 14])  # 5, 70, 101, 7, 8, ... are not kept
    assert not torch.isin(sequence, keep).all()
    expected, rows = full.forward(sequence), reduced.forward(sequence)
    assert rows.shape == (len(sequence), 2050) and reduced.vocab_size == full.vocab_size == 2050
    outside = torch.ones(2050, dtype=torch.bool)
    outside[keep] = False
    assert torch.isinf(rows[:, outside]).all() and torch.isfinite(rows[:, keep]).all()
    assert torch.allclose(rows[:, keep], expected[:, keep], atol=1e-5), (rows[:, keep] - expected[:, keep]).abs().max()
    ids = greedy_ids(reduced, PROMPT, 16)
    assert all(0 <= i < 2050 for i in ids) and torch.isin(torch.tensor(ids), keep).all()
    reduced.reset()
    argmax = reduced.forward_argmax(sequence)  # greedy's fast path: the head row's argmax mapped through keep
    reduced.reset()
    assert argmax.tolist() == reduced.forward(sequence).argmax(dim=-1).tolist() and torch.isin(argmax, keep).all()


class ReadAsZero:
    """Input embeddings that read every id outside `keep` as id 0 (what mapping the context's
    out-of-subset ids to a fixed id would do)."""

    def __init__(self, embeddings, keep: np.ndarray) -> None:
        self.embeddings, self.keep = embeddings, keep
        self.rows, self.width = embeddings.rows, embeddings.width

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        return self.embeddings(np.where(np.isin(ids, self.keep), ids, 0))


def test_negative_control_reading_an_outside_id_as_another_token_changes_the_logits(tiny, tmp_path):
    path, _ = tiny
    full = LlamaCppMember(path, context=256)
    reduced = reduced_member(path, list(range(0, 2050, 3)), tmp_path)
    subset = dataclasses.replace(reduced.subset, embeddings=ReadAsZero(reduced.subset.embeddings, reduced.subset.keep.numpy()))
    mapped = LlamaCppMember(reduced.path, subset=subset, context=256)
    sequence, keep = torch.tensor(PROMPT), subset.keep
    assert torch.allclose(reduced.forward(sequence)[:, keep], full.forward(sequence)[:, keep], atol=1e-5)
    assert not torch.allclose(mapped.forward(sequence)[:, keep], full.forward(sequence)[:, keep], atol=1e-3)


def test_a_greedy_chain_with_the_reduced_drafter_equals_the_target_alone(tiny, tmp_path):
    path, _ = tiny
    target = LlamaCppMember(path, context=256)
    alone = greedy_ids(target, PROMPT, 20)
    drafter = reduced_member(path, sorted(set(range(0, 2050, 2)) | set(alone[:10])), tmp_path)  # most of what it drafts is kept
    result = generate([target, drafter], PROMPT, max_new_tokens=20, block_sizes=[3], sampling=Sampling(0.0))
    assert list(result.token_ids) == alone
    assert result.levels[0].tokens_accepted > 0


def excluded_ids(target: LlamaCppMember, sampling: Sampling) -> list[int]:
    """The target's most likely first token and, after each of its top-k first tokens, its most
    likely second token: the drafter cannot propose these, verification must recover them."""
    joint = target_joint(target, sampling)
    first = joint.sum(1)
    return sorted({int(first.argmax())} | {int(joint[x1].argmax()) for x1 in np.flatnonzero(first)})


def pvalue(chain, reference: LlamaCppMember, sampling: Sampling, seed: int) -> float:
    """Chi-square p-value of the chain's first two tokens against `reference`'s joint."""
    from scipy import stats

    generator = torch.Generator().manual_seed(seed)
    counts: dict[tuple[int, int], int] = {}
    for _ in range(SAMPLES):
        ids = generate(chain, PROMPT, max_new_tokens=2, block_sizes=[2], sampling=sampling, generator=generator).token_ids
        counts[tuple(ids)] = counts.get(tuple(ids), 0) + 1
    joint = target_joint(reference, sampling)
    cells = [tuple(int(i) for i in cell) for cell in zip(*np.nonzero(joint))]
    if any(cell not in cells for cell in counts):
        return 0.0  # a sample the target cannot produce
    observed = np.array([counts.get(cell, 0) for cell in cells])
    expected = np.array([joint[cell] for cell in cells]) * SAMPLES
    return float(stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue)


@pytest.fixture(scope="module")
def sampling_chain(tiny, tmp_path_factory):
    """The target, and a reduced member of the same file without `excluded_ids`."""
    path, _ = tiny
    sampling = Sampling(1.0, top_k=TOP_K)
    target = LlamaCppMember(path, context=256)
    excluded = excluded_ids(target, sampling)
    assert not {0, 2048, 2049} & set(excluded)
    kept = [i for i in range(2050) if i not in excluded]
    return target, reduced_member(path, kept, tmp_path_factory.mktemp("ids")), sampling


def test_a_chain_with_the_reduced_drafter_samples_the_targets_distribution(sampling_chain):
    target, drafter, sampling = sampling_chain
    assert pvalue([target, drafter], target, sampling, seed=3) > ALPHA


def test_negative_control_restricting_the_verifier_fails(sampling_chain, tiny, tmp_path):
    target, drafter, sampling = sampling_chain
    restricted = reduced_member(tiny[0], drafter.subset.keep.tolist(), tmp_path)  # the target, cut to S
    assert pvalue([restricted, drafter], target, sampling, seed=3) < ALPHA


def entries(path: Path, vocab) -> list[dict]:
    return [{"name": "tiny", "source": str(path), "engine": "llama.cpp", "target": True},
            {"name": "tiny-q8", "derive": {"from": "tiny", "quantize": "q8_0"}},
            {"name": "tiny-cut", "derive": {"from": "tiny-q8", "vocab": vocab}}]


def test_models_yaml_vocab_entries_load_cached_and_keep_the_end_and_control_ids(tiny, tmp_path, small_corpus):
    path, q8 = tiny
    loaded = load_candidates(parse_candidates({"candidates": entries(path, 100)}, base_dir=tmp_path, origin="m.yaml"))
    assert loaded.compatible, loaded.compatibility
    target, cut = loaded.chain(["tiny", "tiny-cut"])
    assert cut.subset.keep.numel() == 100 and {0, 2048, 2049} <= set(cut.subset.keep.tolist())
    assert cut.subset.embeddings.path == q8 and cut.token_map() == target.token_map()  # inputs: rows of the q8_0 copy
    assert "head over 100 of 2050 tokens" in loaded.candidates[2].dtype
    alone = greedy_ids(target, PROMPT, 12)
    result = generate([target, cut], PROMPT, max_new_tokens=12, block_sizes=[3], sampling=Sampling(0.0))
    assert list(result.token_ids) == alone
    again = load_candidates(parse_candidates({"candidates": entries(path, 100)}, base_dir=tmp_path, origin="m.yaml"))
    assert again.member("tiny-cut").path == cut.path  # made once
    (tmp_path / "ids.json").write_text(json.dumps({"kept_ids": [5, 6, 7]}), encoding="utf-8")
    listed = load_candidates(parse_candidates({"candidates": entries(path, "ids.json")}, base_dir=tmp_path, origin="m.yaml"))
    assert listed.member("tiny-cut").subset.keep.tolist() == [0, 5, 6, 7, 2048, 2049]


def test_the_fingerprint_names_the_kept_ids(tiny, tmp_path):
    from polyplan.models.fingerprints import candidate_fingerprints

    path, _ = tiny
    ids = tmp_path / "ids.json"
    ids.write_text("[5, 6]", encoding="utf-8")

    def fingerprint(vocab):
        return candidate_fingerprints(parse_candidates({"candidates": entries(path, vocab)}, base_dir=tmp_path))["tiny-cut"]

    first = fingerprint("ids.json")
    ids.write_text("[5, 7]", encoding="utf-8")
    assert len({fingerprint(100), fingerprint(200), first, fingerprint("ids.json")}) == 4


def test_bad_vocab_input_is_one_line(tiny, tmp_path, monkeypatch, small_corpus):
    path, _ = tiny
    monkeypatch.setenv("POLYPLAN_CACHE_DIR", str(tmp_path / "cache"))
    runner = CliRunner()

    def check(items, *fragments):
        one_line_exit_2(runner.invoke(app, ["models", "check", "--candidates", str(write_yaml(tmp_path, items))]), *fragments)

    check(entries(path, 0), "candidate 'tiny-cut'", "vocab must be an integer >= 1")
    check(entries(path, 99_999), "candidate 'tiny-cut'", "N = 99999 must lie in [3, 2050]")
    check(entries(path, "missing.json"), "vocab id list 'missing.json' not found")
    for content, fragment in [("[]", "covers no token"), ("[5, 2050]", "id 2050 is outside the vocabulary [0, 2050)"),
                              ('{"ids": [5]}', "expected a JSON list of token ids"), ("[5, 1.5]", "expected a JSON list")]:
        (tmp_path / "ids.json").write_text(content, encoding="utf-8")
        check(entries(path, "ids.json"), "candidate 'tiny-cut'", fragment)
    on_torch = [{"name": "tiny", "source": str(path), "target": True}, {"name": "cut", "derive": {"from": "tiny", "vocab": 100}}]
    check(on_torch, "candidate 'cut'", "runs on torch")
    of_cut = entries(path, 100) + [{"name": "again", "derive": {"from": "tiny-cut", "quantize": "q4_0"}}]
    check(of_cut, "candidate 'again'", "'tiny-cut' has a reduced vocabulary")
    foreign = tmp_path / "foreign.gguf"
    write_tiny_gguf(foreign, architecture="notamodel")
    with pytest.raises(PolyplanError, match=r"^vocab: foreign.gguf is a notamodel model; a reduced vocabulary needs"):
        llama_vocab.reduced_vocab_copy(foreign, ReducedVocab("x", size=10), tokenizer=None)


def test_engines_cannot_draft_with_a_reduced_copy(tiny, tmp_path):
    from polyplan.planner.engine_export import loadable

    candidate = parse_candidates({"candidates": entries(tiny[0], 100)}, base_dir=tmp_path).by_name("tiny-cut")
    method, _, reason = loadable("llama.cpp", candidate)
    assert method == "" and "head covers a subset of the tokens" in reason


@pytest.mark.parametrize("which", ["float32", "q8_0"])
def test_a_head_cut_is_read_along_with_its_base_and_equals_its_own_read(tiny, tmp_path, which):
    """`profiler.run` reads a head cut of a loaded model's file from that model's passes
    (`head_subset`, `teacher_forced_views`): its argmax and confidences equal its own teacher-forced
    read, greedy and sampled, and the cut itself runs no pass. Negative controls: a cut of another
    file (the other precision's) is not carried, and masking to other ids gives other argmaxes."""
    from polyplan.decoder.llama_cpp_subset import head_subset
    from polyplan.models.fingerprints import ProfiledModel
    from polyplan.profiler.acceptance import teacher_forced, teacher_forced_views
    from polyplan.profiler.run import carried_reads

    path, other = (tiny[0], tiny[1]) if which == "float32" else (tiny[1], tiny[0])
    base = LlamaCppMember(path, context=256)
    cut = reduced_member(path, list(range(0, 2050, 3)), tmp_path)
    (tmp_path / "other").mkdir()
    foreign = reduced_member(other, list(range(0, 2050, 3)), tmp_path / "other")
    assert torch.equal(head_subset(cut, base), cut.subset.keep)
    assert head_subset(foreign, base) is None and head_subset(base, cut) is None and head_subset(cut, cut) is None
    models = [ProfiledModel("base", base, "sha256:b"), ProfiledModel("cut", cut, "sha256:c"), ProfiledModel("foreign", foreign, "sha256:f")]
    assert set(carried_reads(models)) == {"cut"} and carried_reads(models)["cut"][0] == "base"
    prompts = [PROMPT, [3, 40, 41, 90, 7, 8]]
    continuations = [greedy_ids(base, prompt, 12) for prompt in prompts]
    for temperature in (0.0, 1.0):
        kwargs = dict(temperature=temperature, vocab=2050)
        whole, along = teacher_forced_views(base, prompts, continuations, subsets=[cut.subset.keep], **kwargs)
        own = teacher_forced(cut, prompts, continuations, **kwargs)
        if temperature == 0.0:
            assert [a.tolist() for a in teacher_forced(base, prompts, continuations, **kwargs).argmax] == \
                [a.tolist() for a in whole.argmax]  # the base's own view is its plain read
            assert [a.tolist() for a in along.argmax] == [a.tolist() for a in own.argmax]
            for mine, theirs in zip(along.top + along.top10, own.top + own.top10):
                assert torch.allclose(mine, theirs, atol=1e-5)
            elsewhere = teacher_forced_views(base, prompts, continuations, subsets=[cut.subset.keep + 1], **kwargs)[1]
            assert [a.tolist() for a in elsewhere.argmax] != [a.tolist() for a in own.argmax]
        else:
            for mine, theirs in zip(along.probs, own.probs):
                assert torch.allclose(mine, theirs, atol=1e-5)


def test_the_profiler_reads_a_head_cut_without_running_it(tiny, tmp_path):
    """A profiling run's teacher-forced read of a head cut comes from its base's passes (the cut
    runs no pass), and equals the cut's own read (the control: the same run with nothing carried,
    which runs the cut)."""
    from polyplan.models.fingerprints import ProfiledModel
    from polyplan.profiler.prompts import EncodedPrompt, Prompt
    from polyplan.profiler.run import _Run
    from test_profiler_run import SETTINGS

    path, other = tiny  # the target is the other precision's file: a cut of the target reads itself when greedy
    target, base = LlamaCppMember(other, context=256, name="target"), LlamaCppMember(path, context=256)
    cut = reduced_member(path, list(range(0, 2050, 2)), tmp_path)
    passes, real = {"n": 0}, cut.forward

    def counted(*args, **kwargs):
        passes["n"] += 1
        return real(*args, **kwargs)

    cut.forward = counted
    models = [ProfiledModel("target", target, "sha256:t"), ProfiledModel("base", base, "sha256:b"),
              ProfiledModel("cut", cut, "sha256:c")]
    prompts = [EncodedPrompt(Prompt("", "user", f"p:{i}"), tuple(PROMPT + [i + 10, i + 11])) for i in range(3)]
    settings = dataclasses.replace(SETTINGS, acceptance=dataclasses.replace(SETTINGS.acceptance, temperatures=(0.0,), decoded=False))
    carried = _Run(models, prompts, tmp_path / "a.json", settings, "cpu", None, None)
    assert set(carried.carried) == {"cut"}
    along = carried._forced(0.0, "cut")
    assert passes["n"] == 0 and ("base" in {name for _, name in carried.forced})
    own = _Run(models, prompts, tmp_path / "b.json", settings, "cpu", None, None)
    own.carried = {}
    itself = own._forced(0.0, "cut")
    assert passes["n"] > 0
    assert [a.tolist() for a in along.argmax] == [a.tolist() for a in itself.argmax]
