"""`polyplan drafter distill`: a small drafter for ANY target, distilled from it, with an LM head
over the target's N most frequent tokens (FR-Spec style, `decoder.reduced_vocab`).

1. Load the target of a models.yaml (any source: folder, .gguf, hub id, builtin).
2. Corpus: the standard library's source (`zoo.corpus`, the family's corpus; every machine has
   it), encoded with the target's tokenizer; its held-out files score the result.
3. Keep the N most frequent target tokens of that stream, plus every EOS id of the target.
4. A Llama-style drafter (the target's full vocabulary in its embeddings, so it reads any
   token; a `SubsetHead` over the N kept ids) is distilled from the frozen target with the
   zoo's refinement loop (`zoo.refine.refine_drafter`: total variation + KL, the same loop
   that refines the shipped drafter; no second training loop).
5. Written as a HF folder (`save_pretrained`: the head's kept rows in a full-size `lm_head`,
   zeros elsewhere, plus `polyplan-reduced-vocab.json` listing the kept ids), with the target's
   tokenizer, so it works as a `source:` candidate; loading restores the reduced head.

Not built yet (issue 11, item 3): the target's on-policy continuations and a user corpus as
training data, a trained early exit, the recipe for the development model and its α.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from polyplan.formats.errors import PolyplanError

@dataclass(frozen=True)
class DistillSettings:
    """The drafter's shape and the distillation run (defaults: a small first recipe; `QUICK`
    for tests). `window` tokens per training window, `max_corpus_chars` of training text."""

    vocab: int = 8192
    layers: int = 2
    hidden: int = 256
    steps: int = 300
    batch_size: int = 4
    window: int = 256
    learning_rate: float = 1e-3
    max_corpus_chars: int = 2_000_000
    eval_windows: int = 16
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("vocab", "layers", "hidden", "steps", "batch_size", "eval_windows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PolyplanError(f"--{name.replace('_', '-')}: must be an integer >= 1, got {value!r}")
        if self.window < 8:
            raise PolyplanError(f"--window: must be >= 8 tokens, got {self.window}")
        if self.hidden % 32:
            raise PolyplanError(f"--hidden: must be a multiple of 32 (attention heads of 32), got {self.hidden}")


QUICK = DistillSettings(vocab=256, layers=1, hidden=32, steps=3, batch_size=2, window=32, max_corpus_chars=20_000, eval_windows=2)


@dataclass(frozen=True)
class DistillResult:
    """Where the drafter went and how well it agrees with the target (held-out stdlib windows)."""

    out: Path
    kept_tokens: int
    vocab: int
    kept_mass: float  # fraction of the held-out target tokens inside the kept set
    parameters: int
    alpha_before: float
    alpha_after: float
    agreement_before: float
    agreement_after: float
    seconds: float


def distill_drafter(candidates_path: str | Path, out: str | Path, settings: DistillSettings = DistillSettings(),
                    *, target_name: str | None = None, log=lambda line: None) -> DistillResult:
    """Distil a reduced-vocabulary drafter for the target of `candidates_path` into `out`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from polyplan.formats.candidates import read_candidates
    from polyplan.decoder.hf import end_of_sequence_ids
    from polyplan.decoder.reduced_vocab import REDUCED_VOCAB_FILE, most_frequent_tokens, restrict_head
    from polyplan.decoder.sources import source_folder
    from polyplan.zoo.corpus import read_texts, split_stdlib
    from polyplan.zoo.recipe import Refinement, Schedule
    from polyplan.zoo.refine import refine_drafter
    from polyplan.zoo.tokenizer import encode_corpus
    from polyplan.zoo.train import building

    started = time.perf_counter()
    candidates = read_candidates(candidates_path)
    candidate = candidates.target if target_name is None else candidates.by_name(target_name)
    if candidate.derive is not None:
        raise PolyplanError(f"--target: candidate {candidate.name!r} is derived; distil from a 'source' entry")
    out = Path(out)
    if out.exists():
        raise PolyplanError(f"--out: {out} already exists; choose a new folder")
    folder = source_folder(candidate, f"{candidates.origin}: candidate {candidate.name!r}")
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    target = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32).eval()
    vocab = int(target.get_output_embeddings().weight.shape[0])
    if settings.vocab > vocab:
        raise PolyplanError(f"--vocab: {settings.vocab} is more than the target's {vocab} tokens")
    split = split_stdlib()
    train = torch.from_numpy(encode_corpus(tokenizer, read_texts(split.root, split.train, settings.max_corpus_chars))).long()
    held_out = torch.from_numpy(encode_corpus(tokenizer, read_texts(split.root, split.validation, settings.max_corpus_chars // 4))).long()
    stops = end_of_sequence_ids(target, tokenizer)
    keep = most_frequent_tokens(train, vocab, settings.vocab, always=stops)
    kept_mass = float(torch.isin(held_out, keep).double().mean())
    log(f"corpus: {train.numel()} training tokens, {held_out.numel()} held out; "
        f"{settings.vocab} kept ids cover {kept_mass:.1%} of the held-out tokens")
    torch.manual_seed(settings.seed)  # the initialisers draw from the global generator
    drafter = restrict_head(_drafter(target, vocab, settings), keep)
    refinement = Refinement(
        schedule=Schedule(steps=settings.steps, batch_size=settings.batch_size, learning_rate=settings.learning_rate,
                          warmup_steps=max(1, settings.steps // 10)),
        window=settings.window, eval_prompt_tokens=settings.window // 2, eval_continuation_tokens=settings.window // 2,
    )
    metrics = refine_drafter(target, drafter, train, held_out, refinement,
                             eval_windows_count=settings.eval_windows, seed=settings.seed, log=log)
    with building(out) as work:
        _full_head_copy(drafter).save_pretrained(work)
        tokenizer.save_pretrained(work)
        (work / REDUCED_VOCAB_FILE).write_text(json.dumps({
            "kept_ids": keep.tolist(), "target": candidate.name, "settings": asdict(settings),
            "alpha": {"before": metrics.corpus_before.alpha, "after": metrics.corpus_after.alpha},
            "greedy_agreement": {"before": metrics.corpus_before.agreement, "after": metrics.corpus_after.agreement},
            "on_policy_alpha": metrics.on_policy_after.alpha,
        }, indent=2) + "\n", encoding="utf-8")
    return DistillResult(
        out, settings.vocab, vocab, kept_mass, sum(p.numel() for p in drafter.parameters()),
        metrics.corpus_before.alpha, metrics.corpus_after.alpha, metrics.corpus_before.agreement,
        metrics.corpus_after.agreement, time.perf_counter() - started,
    )


def _drafter(target, vocab: int, settings: DistillSettings):
    """A float32 Llama-style drafter with the target's vocabulary, context and special ids."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = target.config.get_text_config(decoder=True)
    heads = settings.hidden // 32
    drafter_config = LlamaConfig(
        vocab_size=vocab, hidden_size=settings.hidden, intermediate_size=4 * settings.hidden,
        num_hidden_layers=settings.layers, num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=int(getattr(config, "max_position_embeddings", 2048) or 2048),
        bos_token_id=getattr(config, "bos_token_id", None), eos_token_id=target.generation_config.eos_token_id,
        pad_token_id=getattr(config, "pad_token_id", None), tie_word_embeddings=False,
    )
    return LlamaForCausalLM(drafter_config).float()


def _full_head_copy(drafter):
    """The drafter with an ordinary full-vocabulary `lm_head` (the kept rows trained, zeros
    elsewhere) so `save_pretrained` writes a standard folder."""
    from torch import nn

    from polyplan.decoder.reduced_vocab import shallow_copy

    head = drafter.get_output_embeddings()  # SubsetHead
    full = nn.Linear(head.in_features, head.out_features, bias=False)
    with torch.no_grad():
        full.weight.zero_()
        full.weight[head.keep] = head.weight
    plain = shallow_copy(drafter)
    plain.set_output_embeddings(full)
    return plain
