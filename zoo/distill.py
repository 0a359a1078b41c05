"""`polyplan drafter distill`: a small drafter for any target of a models.yaml, distilled from it,
with an LM head over the target's N most frequent tokens (`models.reduced_vocab`). `distill_drafter`
is the entry point; the data, the start and the loss are explained in docs/models-yaml.md, "The
embedded family".
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from polyplan.formats.errors import PolyplanError
from polyplan.formats.options import integer_at_least
from polyplan.models.corpus import stdlib_prose

if TYPE_CHECKING:
    from polyplan.zoo.refine import RefineMetrics


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
    on_policy_tokens: int = 16_384
    on_policy_prompt: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        integer_at_least(self.on_policy_tokens, 0, "--on-policy-tokens")
        for name in ("vocab", "layers", "hidden", "steps", "batch_size", "eval_windows", "on_policy_prompt"):
            integer_at_least(getattr(self, name), 1, f"--{name.replace('_', '-')}")
        if self.window < 8:
            raise PolyplanError(f"--window: must be >= 8 tokens, got {self.window}")
        if self.hidden % 32:
            raise PolyplanError(f"--hidden: must be a multiple of 32 (attention heads of 32), got {self.hidden}")


QUICK = DistillSettings(vocab=256, layers=1, hidden=32, steps=3, batch_size=2, window=32, max_corpus_chars=20_000, eval_windows=2,
                        on_policy_tokens=64, on_policy_prompt=8)


@dataclass(frozen=True)
class DistillResult:
    """Where the drafter went and how well it agrees with the target (held-out stdlib windows)."""

    out: Path
    kept_tokens: int
    vocab: int
    kept_mass: float  # fraction of the held-out target tokens inside the kept set
    parameters: int
    metrics: RefineMetrics  # before and after, on held-out windows and on-policy
    seconds: float


def distill_drafter(candidates_path: str | Path, out: str | Path, settings: DistillSettings = DistillSettings(),
                    *, target_name: str | None = None, data: str | Path | None = None, exit_layers: int | None = None,
                    raw_prompts: bool = False, fit_vocab: bool = True,
                    log=lambda line: None) -> DistillResult:
    """Distil a reduced-vocabulary drafter for the target of `candidates_path` into `out`.

    `fit_vocab`: a head larger than the target's vocabulary becomes the whole vocabulary, with a
    note on `log`; False (`--vocab` was given) refuses it instead. `exit_layers` = k: the drafter
    is the target's own first k layers instead (`_exit_student`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from polyplan.formats.candidates import read_candidates
    from polyplan.decoder.hf import end_of_sequence_ids
    from polyplan.models.derive import num_layers
    from polyplan.models.hf_bars import hf_progress_bars_off
    from polyplan.models.reduced_vocab import REDUCED_VOCAB_FILE, most_frequent_tokens, restrict_head
    from polyplan.models.sources import source_folder
    from polyplan.zoo.recipe import Refinement, Schedule
    from polyplan.zoo.refine import refine_drafter
    from polyplan.zoo.train import building

    started = time.perf_counter()
    candidates = read_candidates(candidates_path)
    candidate = candidates.target if target_name is None else candidates.by_name(target_name)
    if candidate.derive is not None:
        raise PolyplanError(f"--target: candidate {candidate.name!r} is derived; distil from a 'source' entry")
    out = Path(out)
    if out.exists():
        raise PolyplanError(f"--out: {out} already exists; choose a new folder")
    user = None if data is None else _user_texts(data)  # a bad file fails before the target loads
    folder = source_folder(candidate, f"{candidates.origin}: candidate {candidate.name!r}")
    with hf_progress_bars_off():  # a bad --vocab below is then the only line on stderr
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        target = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32).eval()
    vocab = int(target.get_output_embeddings().weight.shape[0])
    if settings.vocab > vocab and not fit_vocab:
        raise PolyplanError(f"--vocab: {settings.vocab} is more than the target's {vocab} tokens")
    if exit_layers is not None and not 1 <= exit_layers < num_layers(target):
        raise PolyplanError(f"--exit-layers: {exit_layers} is outside 1..{num_layers(target) - 1} "
                            f"(the target has {num_layers(target)} layers)")
    if settings.vocab > vocab:  # after the checks: a run that fails prints its one error line only
        log(f"note: --vocab: the default {settings.vocab} is more than the target's {vocab} tokens; the head covers all {vocab}")
        settings = replace(settings, vocab=vocab)
    stops = end_of_sequence_ids(target, tokenizer)
    corpus = training_data(tokenizer, settings, user)
    keep = most_frequent_tokens(corpus.train, vocab, settings.vocab, always=stops)
    kept_mass = float(torch.isin(corpus.held_out, keep).double().mean())
    log(f"corpus: {corpus.train.numel()} training tokens, {corpus.held_out.numel()} held out; "
        f"{settings.vocab} kept ids cover {kept_mass:.1%} of the held-out tokens")
    train = corpus.train
    if settings.on_policy_tokens:
        on_policy = _on_policy_stream(target, corpus.train, settings, log, _user_prompt_ids(tokenizer, user or [], raw_prompts))
        repeats = max(1, round(corpus.train.numel() / max(1, on_policy.numel())))
        train = torch.cat([corpus.train, on_policy.repeat(repeats)])  # about half the windows on-policy
    torch.manual_seed(settings.seed)  # the initialisers draw from the global generator
    if exit_layers is None:
        drafter = restrict_head(_drafter(target, vocab, settings), keep)
        _start_from_target_embeddings(drafter, target, keep)
    else:
        drafter = _exit_student(target, exit_layers, keep)
    refinement = Refinement(
        schedule=Schedule(steps=settings.steps, batch_size=settings.batch_size, learning_rate=settings.learning_rate,
                          warmup_steps=max(1, settings.steps // 10)),
        window=settings.window, eval_prompt_tokens=settings.window // 2, eval_continuation_tokens=settings.window // 2,
    )
    metrics = refine_drafter(target, drafter, train, corpus.held_out, refinement, teacher=restrict_head(target, keep),
                             eval_windows_count=settings.eval_windows, seed=settings.seed, log=log)
    with building(out) as work:
        _save_reduced(drafter, work)
        tokenizer.save_pretrained(work)
        (work / REDUCED_VOCAB_FILE).write_text(json.dumps({
            "kept_ids": keep.tolist(), "target": candidate.name, "settings": asdict(settings),
            "alpha": {"before": metrics.corpus_before.alpha, "after": metrics.corpus_after.alpha},
            "greedy_agreement": {"before": metrics.corpus_before.agreement, "after": metrics.corpus_after.agreement},
            "on_policy_alpha": {"before": metrics.on_policy_before.alpha, "after": metrics.on_policy_after.alpha},
            "on_policy_greedy_agreement": {"before": metrics.on_policy_before.agreement, "after": metrics.on_policy_after.agreement},
            "data": None if data is None else str(data), "exit_layers": exit_layers,
        }, indent=2) + "\n", encoding="utf-8")
    parameters = sum(p.numel() for p in drafter.parameters() if p.requires_grad)
    return DistillResult(out, settings.vocab, vocab, kept_mass, parameters, metrics, time.perf_counter() - started)


@dataclass(frozen=True)
class TrainingData:
    """Token streams (1-D int64) to train on and to score on."""

    train: torch.Tensor
    held_out: torch.Tensor


def training_data(tokenizer, settings: DistillSettings, user: list[str] | None = None) -> TrainingData:
    """The stdlib's code and English prose, and the user's texts (`_user_texts`), each split
    19:1 into training and held-out text and encoded with the target's `tokenizer`."""
    from polyplan.models.corpus import read_texts, split_stdlib
    from polyplan.zoo.tokenizer import encode_corpus

    split = split_stdlib()
    sources = [
        (read_texts(split.root, split.train, settings.max_corpus_chars // 2),
         read_texts(split.root, split.validation, settings.max_corpus_chars // 8)),
        _held_out_every(stdlib_prose(settings.max_corpus_chars // 2)),
    ]
    if user:
        sources.append(_held_out_every(user))
    train = [text for texts, _ in sources for text in texts]
    held_out = [text for _, texts in sources for text in texts]
    encode = lambda texts: torch.from_numpy(encode_corpus(tokenizer, texts)).long()
    return TrainingData(encode(train), encode(held_out))


def _user_prompt_ids(tokenizer, texts: list[str], raw: bool = False) -> list[list[int]]:
    """The user's texts as decoding sends them: through the target's chat template unless
    `raw` or the tokenizer has none (`decoder.chat.encode_prompt`)."""
    from polyplan.decoder.chat import encode_prompt

    return [encode_prompt(tokenizer, text, raw=raw, where=f"--data text {index + 1}") for index, text in enumerate(texts)]


def _user_texts(path: str | Path) -> list[str]:
    """The texts of a user's data file: a jsonl of prompts (`turns`, `prompt` or `text`) or
    plain text (blank-line separated), read by the profiler's prompt reader."""
    from polyplan.profiler.prompts import read_prompt_file

    return [prompt.text for prompt in read_prompt_file(path)]


def _held_out_every(texts: list[str], every: int = 20) -> tuple[list[str], list[str]]:
    """(training, held-out) texts: one in `every` held out (the last of each run of `every`)."""
    held = [text for index, text in enumerate(texts) if index % every == every - 1]
    return [text for index, text in enumerate(texts) if index % every != every - 1], held or texts[-1:]


def _on_policy_stream(target, train: torch.Tensor, settings: DistillSettings, log,
                     prompts: list[list[int]] | None = None) -> torch.Tensor:
    """About `settings.on_policy_tokens` tokens of the target's own greedy text, each piece a prompt
    and its continuation: first the user's `prompts` (token ids as decoding sends them), then
    `on_policy_prompt`-token prompts cut evenly from `train`, continued in wide batches (the head
    streams once per step)."""
    from polyplan.zoo.optim import eval_windows
    from polyplan.zoo.refine import greedy_continuations

    started = time.perf_counter()
    continuation = max(1, settings.window - settings.on_policy_prompt)
    pieces = [greedy_continuations(target, torch.tensor([ids[-settings.window:]]), continuation)[0]
              for ids in (prompts or [])[: max(1, -(-settings.on_policy_tokens // continuation))]]
    remaining = settings.on_policy_tokens - sum(piece.numel() for piece in pieces)
    count = -(-max(0, remaining) // continuation)
    if count:
        cut = eval_windows(train, settings.on_policy_prompt - 1, count)  # (count, prompt)
        pieces += [row for chunk in cut.split(64) for row in greedy_continuations(target, chunk, continuation)]
    log(f"on-policy: {len(pieces)} target continuations of {continuation} tokens, {min(len(prompts or []), len(pieces))} of them "
        f"of your prompts ({time.perf_counter() - started:.0f}s)")
    return torch.cat(pieces)


def _start_from_target_embeddings(drafter, target, keep: torch.Tensor) -> None:
    """Initialise the drafter's embeddings and kept head rows from the target's (`projected_embeddings`)."""
    embeddings = projected_embeddings(target.get_input_embeddings().weight.detach().float(), keep,
                                      drafter.config.hidden_size, drafter.config.initializer_range)
    with torch.no_grad():
        drafter.get_input_embeddings().weight.copy_(embeddings)
        drafter.get_output_embeddings().weight.copy_(embeddings[keep])


def projected_embeddings(embeddings: torch.Tensor, keep: torch.Tensor, hidden: int, std: float) -> torch.Tensor:
    """The target's (V, H_t) embeddings projected onto the top `hidden` principal directions
    of the kept rows, scaled to entries of standard deviation `std`: (V, hidden). Where the
    target is narrower than `hidden`, the remaining columns are zero."""
    kept = embeddings[keep]
    centred = kept - kept.mean(0)
    directions = torch.linalg.svd(centred, full_matrices=False).Vh[:hidden]  # (min(hidden, H_t), H_t)
    projected = embeddings @ directions.T  # (V, min(hidden, H_t))
    projected = projected * (std / projected[keep].std().clamp_min(1e-12))
    if projected.shape[1] < hidden:
        projected = torch.cat([projected, projected.new_zeros(projected.shape[0], hidden - projected.shape[1])], dim=1)
    return projected


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


def _exit_student(target, layers: int, keep: torch.Tensor):
    """The target's first `layers` layers (shared and frozen: the target never changes), then a
    trainable copy of its final norm, then a trainable head over the kept ids (its rows start
    as the target's head rows)."""
    import copy

    from polyplan.models.derive import early_exit_model
    from polyplan.models.reduced_vocab import restrict_head

    exit_model = early_exit_model(target, layers)  # a shallow copy: the target is untouched
    inner = getattr(exit_model, getattr(exit_model, "base_model_prefix", "model"))
    if not isinstance(getattr(inner, "norm", None), torch.nn.Module):
        raise PolyplanError(f"--exit-layers: {type(target).__name__} has no final norm to train")
    for parameter in exit_model.parameters():
        parameter.requires_grad_(False)
    inner._modules["norm"] = copy.deepcopy(inner.norm).requires_grad_(True)
    student = restrict_head(exit_model, keep)  # its head rows are a trainable clone
    student.get_output_embeddings().requires_grad_(True)
    return student


def _save_reduced(model, folder: Path) -> None:
    """Save a model with a reduced head as a standard HF folder: its config with tied
    embeddings (so no V-row head is written; a V x H zero-padded head would double a gemma
    drafter's size) and its kept head rows in `REDUCED_HEAD_FILE`, which loading restores."""
    import copy

    from torch import nn

    from polyplan.models.reduced_vocab import save_reduced_head
    from polyplan.decoder.shallow_copy import shallow_copy

    embeddings = model.get_input_embeddings()
    head = nn.Linear(embeddings.embedding_dim, embeddings.num_embeddings, bias=False, device="meta")
    head.weight = embeddings.weight
    plain = shallow_copy(model)
    plain.config = copy.deepcopy(model.config)
    plain.config.tie_word_embeddings = True
    plain.set_output_embeddings(head)
    plain.save_pretrained(folder)
    save_reduced_head(folder, model)
