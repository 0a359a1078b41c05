"""Benchmark (not a test): polyplan's decoding loop against Hugging Face `generate`, greedy, side
by side in one run (plain: n = 1 against `generate()`; speculative: n = 2 against
`generate(assistant_model=draft)` drafting exactly K tokens a round), interleaved so that machine
noise hits both sides alike. A ratio is Hugging Face time / polyplan time. docs/validation.md,
"`polyplan bench decoder`".
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from polyplan.decoder.chain import generate
from polyplan.decoder.hf import HFMember
from polyplan.decoder.sampling import Sampling
from polyplan.formats.verbosity import other_output_shown


@dataclass(frozen=True)
class DecoderRace:
    """One comparison: total seconds of each side over every prompt and repeat."""

    label: str
    polyplan_s: float
    huggingface_s: float
    tokens_equal: bool
    mean_tokens_per_verification: float

    @property
    def ratio(self) -> float:
        """Hugging Face time / polyplan time (> 1: polyplan is faster)."""
        return self.huggingface_s / self.polyplan_s


@dataclass(frozen=True)
class DecoderBenchmark:
    """Both races and the settings they ran with."""

    races: tuple[DecoderRace, ...]
    target: str
    draft: str
    prompts: int
    max_new_tokens: int
    block_size: int
    repeats: int
    threads: int


def _random_llama_pair(seed: int = 0, *, layers: int = 8, hidden: int = 256, vocab: int = 4096, draft_layers: int = 1,
                       residual_scale: float = 0.05):
    """A random-initialised float32 Llama target and a layer-skip draft: the target's first
    `draft_layers` layers with the same embeddings and head.

    Untrained, the remaining layers would scramble the argmax (acceptance near 0), so their
    residual branches (attention output and MLP down projections) are scaled by
    `residual_scale`, which leaves the draft right often enough to stand in for a real drafter;
    they still cost a full layer's compute each. The vocabulary is small so that the head does
    not cost as much as the layers and make the one-layer draft nearly as slow as the target.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    heads = max(1, hidden // 64)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=2048,
                         bos_token_id=None, eos_token_id=None, pad_token_id=0)
    with torch.random.fork_rng(devices=[]):  # the initialisers draw from the global generator, restored after
        torch.manual_seed(seed)
        target = LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        for layer in target.model.layers[draft_layers:]:
            layer.self_attn.o_proj.weight.mul_(residual_scale)
            layer.mlp.down_proj.weight.mul_(residual_scale)
    draft = copy.deepcopy(target)
    draft.model.layers = draft.model.layers[:draft_layers]
    draft.config.num_hidden_layers = draft_layers
    return target, draft


def configure_assistant(draft, block_size: int) -> None:
    """Make HF assisted generation draft exactly `block_size` tokens per round with `draft`
    (transformers reads K and its schedule from the *assistant's* generation config), with the
    confidence-threshold early exit off."""
    assistant = draft.generation_config
    assistant.num_assistant_tokens = block_size
    assistant.num_assistant_tokens_schedule = "constant"
    assistant.assistant_confidence_threshold = 0.0


@contextlib.contextmanager
def transformers_errors_only() -> Iterator[None]:
    """transformers' own logging at error level for a while: assisted `generate` warns on every
    call about arguments its assistant path passes itself, nothing the user set."""
    from transformers.utils import logging

    if other_output_shown():  # `polyplan --verbose`
        yield
        return
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def hf_generate(target, prompt: Sequence[int], *, max_new_tokens: int, eos, pad: int, **extra) -> list[int]:
    """Greedy `target.generate` on one prompt (extra: assistant_model, prompt_lookup_num_tokens, …);
    the new token ids only."""
    ids = torch.tensor([list(prompt)], device=target.device)
    with torch.inference_mode(), transformers_errors_only():
        out = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new_tokens,
                              eos_token_id=eos, pad_token_id=pad, **extra)
    return out[0, len(prompt) :].tolist()  # .tolist() synchronises an asynchronous device


def _benchmark_decoder(target, draft, prompts: Sequence[Sequence[int]], *, max_new_tokens: int = 64,
                       block_size: int = 4, repeats: int = 3, target_name: str = "target",
                       draft_name: str = "draft") -> DecoderBenchmark:
    """Race polyplan against Hugging Face `generate` (plain and assisted), greedy: each prompt once
    untimed (warm-up), then `repeats` times per side, alternating which side goes first; both
    stop at the target's EOS (if its generation config has one) or after `max_new_tokens`."""
    eos, pad = target.generation_config.eos_token_id, target.generation_config.pad_token_id
    pad = pad if pad is not None else 0
    configure_assistant(draft, block_size)
    members = [HFMember(target, name=target_name), HFMember(draft, name=draft_name)]
    greedy = Sampling(temperature=0.0)

    per_verification: list[int] = []

    def ours(chain: list[HFMember], blocks: list[int]) -> Callable[[list[int]], list[int]]:
        def run(prompt: list[int]) -> list[int]:
            result = generate(chain, prompt, max_new_tokens=max_new_tokens, block_sizes=blocks, sampling=greedy, eos_token_id=eos)
            per_verification.extend(result.levels[0].tokens_per_verification)
            return list(result.token_ids)

        return run

    def theirs(**extra) -> Callable[[list[int]], list[int]]:
        def run(prompt: list[int]) -> list[int]:
            return hf_generate(target, prompt, max_new_tokens=max_new_tokens, eos=eos, pad=pad, **extra)

        return run

    pairs = [
        ("n=1 vs generate()", ours(members[:1], []), theirs()),
        (f"n=2 vs generate(assistant_model), K={block_size}", ours(members, [block_size]), theirs(assistant_model=draft)),
    ]
    races = []
    for label, mine, reference in pairs:
        seconds = [0.0, 0.0]
        equal = True
        per_verification.clear()
        for prompt in prompts:
            prompt = list(prompt)
            equal &= mine(prompt) == reference(prompt)  # warm-up, and the tokens must agree
            for repeat in range(repeats):
                order = ((0, mine), (1, reference)) if repeat % 2 == 0 else ((1, reference), (0, mine))
                for side, run in order:
                    began = time.perf_counter()
                    run(prompt)
                    seconds[side] += time.perf_counter() - began
        mean = sum(per_verification) / len(per_verification) if per_verification else 1.0
        races.append(DecoderRace(label, seconds[0], seconds[1], equal, mean))
    return DecoderBenchmark(tuple(races), target_name, draft_name, len(prompts), max_new_tokens, block_size, repeats,
                            torch.get_num_threads())


def _random_prompts(count: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """`count` prompts of `length` random token ids in [1, vocab)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab, (count, length), generator=generator).tolist()


def report_lines(bench: DecoderBenchmark) -> list[str]:
    """The human-readable table `polyplan bench decoder` prints."""
    lines = [
        f"target {bench.target}, draft {bench.draft}: {bench.prompts} prompts x {bench.repeats} repeats, "
        f"greedy, max_new_tokens={bench.max_new_tokens}, torch threads={bench.threads}",
        f"{'race':<44} {'polyplan s':>10} {'HF s':>9} {'ratio HF/ours':>13} {'tokens equal':>12} {'tokens/verif.':>13}",
    ]
    for race in bench.races:
        lines.append(
            f"{race.label:<44} {race.polyplan_s:>10.3f} {race.huggingface_s:>9.3f} {race.ratio:>13.3f} "
            f"{('yes' if race.tokens_equal else 'NO'):>12} {race.mean_tokens_per_verification:>13.2f}"
        )
    return lines


def benchmark_json(bench: DecoderBenchmark) -> dict:
    """`polyplan bench decoder --json`: the settings and one object per race."""
    settings = ("target", "draft", "prompts", "max_new_tokens", "block_size", "repeats", "threads")
    measured = ("polyplan_s", "huggingface_s", "ratio", "tokens_equal", "mean_tokens_per_verification")
    races = [{"race": race.label} | {name: getattr(race, name) for name in measured} for race in bench.races]
    return {name: getattr(bench, name) for name in settings} | {"races": races}


_TEXT_PROMPTS = (
    "The quick brown fox jumps over the lazy dog because",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "In 1905 Albert Einstein published four papers that",
    "Speculative decoding speeds up large language models by",
    "Once upon a time, in a small village by the sea,",
    "The three laws of thermodynamics state that",
)


def run_decoder_benchmark(target_dir: str | None = None, draft_dir: str | None = None, *, prompts: int = 4,
                          prompt_length: int = 16, max_new_tokens: int = 64, block_size: int = 4, repeats: int = 3,
                          device: str = "cpu", texts: Sequence[str] | None = None,
                          raw: bool = False) -> DecoderBenchmark:
    """`_benchmark_decoder` on local model folders (or .gguf files), or on `_random_llama_pair()`
    when none are given.

    With folders, the prompts are `texts` (e.g. a user's prompt file) or else `prompts` fixed
    English/code snippets, encoded by the target's tokenizer through its chat template unless
    `raw` (`decoder.chat.encode_prompt`); without, `prompts` random id sequences of
    `prompt_length` tokens.
    """
    from polyplan.formats.errors import PolyplanError

    if (target_dir is None) != (draft_dir is None):
        raise PolyplanError("--target/--draft: give both model folders, or neither for the built-in random models")
    if prompts < 1 or repeats < 1 or block_size < 1 or max_new_tokens < 1:
        raise PolyplanError("prompts, repeats, block_size and max_new_tokens must all be >= 1")
    if texts is not None and target_dir is None:
        raise PolyplanError("--prompts FILE: needs --target and --draft (the random models have no tokenizer)")
    if target_dir is None:
        target, draft = _random_llama_pair()
        target, draft = target.to(device), draft.to(device)
        names = ("random-llama-8x256", "its-first-layer")
        ids = _random_prompts(prompts, prompt_length, target.config.vocab_size)
    else:
        from polyplan.models.chain_candidates import ChainCandidates

        chain = ChainCandidates.from_names(None, [str(target_dir), str(draft_dir)], device=device)
        loaded = chain.load()
        target, draft = (member.model for member in loaded.members)
        names = chain.chain
        from polyplan.decoder.chat import encode_prompt

        if texts is None:
            texts = [_TEXT_PROMPTS[i % len(_TEXT_PROMPTS)] for i in range(prompts)]
        ids = [encode_prompt(loaded.tokenizer, text, raw=raw) for text in texts]
    return _benchmark_decoder(target, draft, ids, max_new_tokens=max_new_tokens, block_size=block_size, repeats=repeats,
                              target_name=names[0], draft_name=names[1])
