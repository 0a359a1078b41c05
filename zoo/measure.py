"""Side-by-side measurements of a trained family: decode-step latency and a greedy sample.
Timings on a shared CPU are noisy, so compare the ratios within one run."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from polyplan.models.derive import early_exit_model, quantize_model


@dataclass(frozen=True)
class StepTiming:
    """Median and quartiles (ms) of `repeats` one-token decode steps of model `name`."""

    name: str
    median_ms: float
    q1_ms: float
    q3_ms: float
    repeats: int


@torch.inference_mode()
def decode_step_ms(
    models: dict[str, nn.Module], *, context: int = 64, repeats: int = 100, warmup: int = 10
) -> dict[str, StepTiming]:
    """Time one-token forward passes of every model with a warm cache of `context` tokens. The
    models take turns step by step, so that load from other processes hits all of them alike, and
    each cache is cropped back after every step, so that every timed step sees the same context."""
    from transformers import DynamicCache

    from polyplan.decoder.hf import cache_keyword

    generator = torch.Generator().manual_seed(0)
    caches = {}
    for name, model in models.items():
        prompt = torch.randint(0, model.config.vocab_size, (1, context), generator=generator)
        caches[name] = DynamicCache(config=model.config)
        model(input_ids=prompt, use_cache=True, **{cache_keyword(model): caches[name]})
    token = torch.tensor([[1]])
    position = torch.tensor([[context]])
    samples: dict[str, list[float]] = {name: [] for name in models}
    for index in range(warmup + repeats):
        for name, model in models.items():
            started = time.perf_counter()
            model(input_ids=token, position_ids=position, use_cache=True, **{cache_keyword(model): caches[name]})
            elapsed = time.perf_counter() - started
            caches[name].crop(-1)  # transformers 5.x: a negative value drops that many tokens
            if index >= warmup:
                samples[name].append(elapsed * 1e3)
    timings = {}
    for name, values in samples.items():
        q1, median, q3 = statistics.quantiles(values, n=4)
        timings[name] = StepTiming(name, median, q1, q3, repeats)
    return timings


def family_members(target: nn.Module, drafter: nn.Module, early_exit_layers: int) -> dict[str, nn.Module]:
    """The family's table: target, target-int8, target-exit<k> and drafter."""
    return {
        "target": target,
        "target-int8": quantize_model(target, "int8"),
        f"target-exit{early_exit_layers}": early_exit_model(target, early_exit_layers),
        "drafter": drafter,
    }


def family_variants(folder: Path, early_exit_layers: int) -> dict[str, nn.Module]:
    """`family_members` of the family in `folder` (float32, CPU)."""
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(folder / "target", local_files_only=True, dtype=torch.float32).eval()
    drafter = AutoModelForCausalLM.from_pretrained(folder / "drafter", local_files_only=True, dtype=torch.float32).eval()
    return family_members(target, drafter, early_exit_layers)


def greedy_sample(model: nn.Module, tokenizer, prompt: str, new_tokens: int) -> str:
    """The model's greedy continuation of `prompt` (`zoo.refine.greedy_continuations`)."""
    from polyplan.zoo.refine import greedy_continuations

    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    return tokenizer.decode(greedy_continuations(model, ids, new_tokens)[0, ids.shape[1]:].tolist())
