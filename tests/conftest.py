"""Shared fixtures: tiny random-initialised Llama models and a tiny word-level tokenizer.

Everything is built in-process from a fixed seed; nothing is downloaded.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

TINY_VOCAB = 64


def shipped_paper_profile() -> Path:
    """The paper's Table 1 profile as the package ships it (`polyplan/data`, read through
    importlib.resources: the one copy; `polyplan theory report` reads the same file)."""
    from importlib import resources

    return Path(str(resources.files("polyplan") / "data" / "paper_table1_profile.json"))


def tiny_llama(seed: int = 0, *, layers: int = 2, hidden: int = 32, vocab: int = TINY_VOCAB, init: float = 0.2, max_context: int = 256):
    """A random-initialised float32 `LlamaForCausalLM` (CPU, eval mode).

    `init` is the initialiser's standard deviation: larger than Llama's 0.02 so the layers
    matter and the logits are spread out (fewer near-ties between float32 orderings).
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_context,
        initializer_range=init,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)  # the models' initialisers draw from the global generator
    return LlamaForCausalLM(config).float().eval()


def perturbed_copy(model, noise: float, seed: int):
    """A copy of `model` with Gaussian noise of relative size `noise` added to every weight."""
    clone = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in clone.parameters():
            parameter.add_(noise * parameter.std() * torch.randn(parameter.shape, generator=generator))
    return clone


def truncated_copy(model, layers: int):
    """A layer-skip drafter: the first `layers` decoder layers of `model`, same embeddings and head."""
    clone = copy.deepcopy(model)
    clone.model.layers = clone.model.layers[:layers]
    clone.config.num_hidden_layers = layers
    return clone


def tiny_tokenizer(vocab: int = TINY_VOCAB, *, swap: tuple[int, int] | None = None, eos_token: str = "</s>"):
    """A word-level fast tokenizer: <pad> <s> </s> <unk> then words w4 … w{vocab-1}.

    `swap=(i, j)` exchanges the ids of two words (same size, different token map);
    `eos_token` picks another end-of-sequence token (same map, different special tokens).
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    words.update({f"w{i}": i for i in range(4, vocab)})
    if swap is not None:
        first, second = (next(word for word, index in words.items() if index == i) for i in swap)
        words[first], words[second] = words[second], words[first]
    backend = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token=eos_token, unk_token="<unk>"
    )


def save_model(folder: Path, model, tokenizer) -> Path:
    """Save `model` and `tokenizer` with `save_pretrained` into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def llama_factory():
    """`tiny_llama` for tests that want it as a fixture."""
    return tiny_llama


@pytest.fixture(scope="session")
def tokenizer_factory():
    """`tiny_tokenizer` for tests that want it as a fixture."""
    return tiny_tokenizer


@pytest.fixture(scope="session", autouse=True)
def cli_command_built_once():
    """typer's `CliRunner.invoke(app, ...)` builds the click command tree of the whole app on every
    call (every command's signature and annotations evaluated: most of a refused command's
    time, and the suite invokes the CLI in-process thousands of times). Build it once per app:
    the same objects typer would build, invoked afresh each time (a click command keeps no state
    between invocations)."""
    import typer.testing

    build = typer.testing._get_command
    built: dict = {}

    def once(app):
        if app not in built:
            built[app] = build(app)
        return built[app]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(typer.testing, "_get_command", once)
        yield


@pytest.fixture(scope="session", autouse=True)
def private_timing_lock(tmp_path_factory):
    """The machine-wide timing lock (`profiler.locks.timing_lock`) in a folder of this test
    session's own (`POLYPLAN_LOCK_DIR`, inherited by the CLI subprocesses the tests start), so a
    test never waits for another polyplan run on the machine to finish its timings; the tests of
    the lock itself set their own folder."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("POLYPLAN_LOCK_DIR", str(tmp_path_factory.mktemp("locks")))
        yield


SHORT_CALIBRATION_TOKENS = 16  # the product's own floor (pipeline.loop_costs.MIN_CALIBRATION_TOKENS)


@pytest.fixture(scope="module")
def short_calibrations():
    """Profiling runs of a test module decode `SHORT_CALIBRATION_TOKENS` tokens per timed call of
    the loop-cost calibrations (the loop overhead, HF generate's overhead) instead of
    `pipeline.stages.profile_candidates`' default, as the product does for a slow target: the same
    entries, fitted from shorter calls, for modules that test something else than their values.
    Module fixtures that profile should request it, so that it is in place before they run."""
    from polyplan.pipeline.stages import profile_candidates

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(profile_candidates.__kwdefaults__, "calibration_tokens", SHORT_CALIBRATION_TOKENS)
        yield


@pytest.fixture(scope="session")
def quick_family(tmp_path_factory) -> Path:
    """The quick recipe's family, trained once through `polyplan zoo train --quick --seed 3` (the
    zoo tests read it; none may change it)."""
    from typer.testing import CliRunner

    from polyplan.cli.app import app

    out = tmp_path_factory.mktemp("zoo") / "family"
    result = CliRunner().invoke(app, ["zoo", "train", "--quick", "--out", str(out), "--seed", "3"])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def single_thread():
    """Run a test module with one torch thread, then restore the previous setting.

    On a small shared, loaded machine, waking a second OpenMP thread for tiny tensors costs up
    to a millisecond per op (a tiny Llama forward went from 4 ms to 140 ms); the decoder tests
    run thousands of tiny ops. Module fixtures that run models should request it too.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def synthetic_plan(folder: Path, models_yaml: Path, times: dict, pairs: dict, *, recorded: bool = True, sampling: str = "greedy",
                   device: str = "synthetic", max_levels: int = 3) -> Path:
    """plan.json (and profile.json) in `folder` for the models of `models_yaml`, from a
    synthetic profile with their real fingerprints: each model's latency `times[name]` seconds
    at k = 1 (+10% per extra token; the first is the target), α per (upper, lower) pair; the
    plan records its models.yaml unless `recorded` is False. Nothing is loaded or timed."""
    import yaml

    from polyplan.formats.candidates import read_candidates
    from polyplan.formats.plan import write_plan
    from polyplan.formats.profile import LatencyPoint, ModelProfile, Profile, SamplingStats, write_profile
    from polyplan.models.fingerprints import candidate_fingerprints
    from polyplan.planner.plan_builder import plan_of
    from polyplan.planner.search import SearchSettings, rank_chains

    prints = candidate_fingerprints(read_candidates(models_yaml))
    models = tuple(ModelProfile(name, prints[name], tuple(LatencyPoint(64, k, seconds * (1 + 0.1 * (k - 1))) for k in (1, 2, 4, 8)))
                   for name, seconds in times.items())
    profile = Profile(target=next(iter(times)), device=device, models=models, pairs=())
    for (upper, lower), alpha in pairs.items():
        profile = profile.with_stats(upper, lower, sampling, SamplingStats(alpha=alpha, engine_alpha=alpha))
    write_profile(profile, folder / "profile.json")
    record = {"path": str(models_yaml), "yaml": yaml.safe_load(Path(models_yaml).read_text())} if recorded else None
    path = folder / "plan.json"
    write_plan(plan_of(rank_chains(profile, SearchSettings(max_levels=max_levels, k_max=4, sampling=sampling)),
                       profile_path=str(folder / "profile.json"), candidates=record), path)
    return path


def write_candidate_workspace(root: Path) -> Path:
    """A small candidate set in `root`: a 4-layer target, a perturbed 1-layer drafter and
    prompt lookup, listed in `models.yaml`, plus three word prompts in `prompts.jsonl`."""
    import json

    save_model(root / "target", tiny_llama(0, layers=4, hidden=64), tiny_tokenizer())
    save_model(root / "small", perturbed_copy(tiny_llama(0, layers=1, hidden=32), 0.2, seed=1), tiny_tokenizer())
    (root / "models.yaml").write_text(
        "candidates:\n"
        "  - {name: target, source: ./target, target: true}\n"
        "  - {name: small, source: ./small}\n"
        "  - {name: ngram, derive: {kind: ngram, max_n: 3}}\n"
    )
    lines = [json.dumps({"turns": [" ".join(f"w{(7 * i + j) % 60 + 4}" for j in range(20))]}) for i in range(3)]
    (root / "prompts.jsonl").write_text("\n".join(lines) + "\n")
    return root


def target_early_ngram():
    """Profiled models for profiler tests: a 4-layer target, its 1-layer early exit and an
    n-gram drafter, costs far enough apart that the measured order (hence the pair set) does
    not depend on timing noise."""
    from polyplan.decoder import HFMember, NGramMember
    from polyplan.profiler import ProfiledModel, fingerprint_module

    target = tiny_llama(0, layers=4, hidden=64)
    early = truncated_copy(target, 1)
    return [
        ProfiledModel("target", HFMember(target, name="target"), fingerprint_module(target)),
        ProfiledModel("early", HFMember(early, name="early"), fingerprint_module(early)),
        ProfiledModel("ngram", NGramMember(TINY_VOCAB, max_n=3), "ngram:3"),
    ]


@pytest.fixture()
def gguf_pair(tmp_path):
    """Parsed candidates: a llama.cpp target and drafter, two placeholder GGUF files (for the
    export and ranking tests, which read names and engines, never the files)."""
    from polyplan.formats.candidates import parse_candidates

    for name in ("target.gguf", "draft.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    return parse_candidates({"candidates": [
        {"name": "target", "source": "target.gguf", "target": True, "engine": "llama.cpp"},
        {"name": "draft", "source": "draft.gguf", "engine": "llama.cpp"},
    ]}, base_dir=tmp_path)


@pytest.fixture
def no_tie_check(monkeypatch):
    """Streams' near-ties without the bindings: no flips (the check itself: test_near_ties.py)."""
    from polyplan.engines.llama_cpp import prices as llama_cpp_prices
    from polyplan.planner.llama_cpp.near_ties import NearTies, StreamTies, stream_digest

    monkeypatch.setattr(llama_cpp_prices, "measure_near_ties", lambda path, threads, streams, widths, log=None: NearTies(
        tuple(widths), tuple(StreamTies(stream_digest(stream), tuple(() for _ in widths)) for stream in streams)))
