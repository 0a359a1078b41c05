"""Training the zoo family (`train_family`): a target with an early-exit auxiliary loss and a drafter
distilled from it, one HF folder each plus `family.json` with the measured numbers.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoTokenizer, LlamaForCausalLM, PreTrainedTokenizerFast

from polyplan.formats.errors import PolyplanError
from polyplan.models.builtin import FAMILY_FILE
from polyplan.models.corpus import read_texts, split_stdlib
from polyplan.zoo.measure import family_members
from polyplan.zoo.optim import adamw, eval_windows, learning_rate, optimizer_step, random_windows
from polyplan.zoo.recipe import Recipe, Refinement
from polyplan.zoo.refine import RefineMetrics, refine_drafter
from polyplan.zoo.tokenizer import encode_corpus, train_tokenizer

TARGET, DRAFTER = "target", "drafter"

Log = Callable[[str], None]


@dataclass(frozen=True)
class FamilyReport:
    """What one run of the recipe measured (also written to `family.json`)."""

    recipe: str
    seed: int
    parameters: dict[str, int]
    validation_loss: dict[str, float]
    greedy_agreement_with_target: dict[str, float]
    train_tokens: int
    validation_tokens: int
    wall_seconds: dict[str, float]
    refine: RefineMetrics | None = None


def train_pair(
    recipe: Recipe, train: torch.Tensor, target_config, drafter_config, seed: int, log: Log
) -> tuple[LlamaForCausalLM, LlamaForCausalLM]:
    """Train the target and, on the same batches, the drafter distilled from it online.

    Target loss: cross-entropy + `early_exit_weight` x the cross-entropy of its first
    `early_exit_layers` layers through the final norm and head (so its early exit drafts well).
    Drafter loss: w x KL(target || drafter) + (1 - w) x cross-entropy, w ramping from 0 to
    `distill_weight` over the first half (the target's outputs are noise at first); the target's
    logits are computed anyway, so distilling costs no second pass through it."""
    torch.manual_seed(seed)  # HF initialises weights from the global generator
    target = LlamaForCausalLM(target_config).train()
    drafter = LlamaForCausalLM(drafter_config).train()
    target_schedule, drafter_schedule = recipe.target_schedule, recipe.drafter_schedule
    if drafter_schedule.steps != target_schedule.steps or drafter_schedule.batch_size != target_schedule.batch_size:
        raise PolyplanError("recipe: the drafter trains on the target's batches; steps and batch_size must match")
    target_optimizer = adamw(target, target_schedule)
    drafter_optimizer = adamw(drafter, drafter_schedule)
    generator = torch.Generator().manual_seed(seed + 1)
    captured: dict[str, torch.Tensor] = {}
    hook = target.model.layers[recipe.early_exit_layers - 1].register_forward_hook(
        lambda _module, _inputs, output: captured.__setitem__(
            "hidden", output[0] if isinstance(output, tuple) else output
        )
    )
    started = time.perf_counter()
    try:
        for step in range(target_schedule.steps):
            batch = random_windows(train, recipe.seq_len, target_schedule.batch_size, generator)
            inputs, labels = batch[:, :-1], batch[:, 1:].flatten()  # (B, L), (B*L,)
            logits = target(inputs).logits.flatten(0, 1)  # (B*L, V)
            loss = F.cross_entropy(logits, labels)
            early = target.lm_head(target.model.norm(captured["hidden"])).flatten(0, 1)
            early_loss = F.cross_entropy(early, labels)
            optimizer_step(target, target_optimizer, loss + recipe.early_exit_weight * early_loss,
                  learning_rate(step, target_schedule))

            weight = recipe.distill_weight * min(1.0, step / max(1, target_schedule.steps // 2))
            drafter_logits = drafter(inputs).logits.flatten(0, 1)  # (B*L, V)
            drafter_loss = F.cross_entropy(drafter_logits, labels)
            teacher = F.log_softmax(logits.detach(), dim=-1)
            kl = F.kl_div(F.log_softmax(drafter_logits, dim=-1), teacher, log_target=True,
                          reduction="batchmean")
            optimizer_step(drafter, drafter_optimizer, weight * kl + (1 - weight) * drafter_loss,
                  learning_rate(step, drafter_schedule))
            if step % 10 == 0 or step == target_schedule.steps - 1:
                log(
                    f"step {step}/{target_schedule.steps} target {loss.item():.3f} "
                    f"early-exit {early_loss.item():.3f} drafter {drafter_loss.item():.3f} "
                    f"kl {kl.item():.3f} ({time.perf_counter() - started:.0f}s)"
                )
    finally:
        hook.remove()
    return target.eval(), drafter.eval()


@torch.inference_mode()
def validation_loss(model: nn.Module, windows: torch.Tensor, batch_size: int = 8) -> float:
    """Mean next-token cross-entropy (nats) over held-out `windows` (count, L + 1)."""
    total, count = 0.0, 0
    for chunk in windows.split(batch_size):
        logits = model(chunk[:, :-1]).logits.float()
        total += F.cross_entropy(logits.flatten(0, 1), chunk[:, 1:].flatten(), reduction="sum").item()
        count += chunk[:, 1:].numel()
    return total / count


@torch.inference_mode()
def _greedy_tokens(model: nn.Module, windows: torch.Tensor, batch_size: int = 8) -> torch.Tensor:
    """The argmax next token at every position of `windows` (count, L + 1): shape (count, L)."""
    return torch.cat([model(chunk[:, :-1]).logits.argmax(-1) for chunk in windows.split(batch_size)])


@torch.inference_mode()
def _agreement_with(reference: torch.Tensor, other: nn.Module, windows: torch.Tensor, batch_size: int = 8) -> float:
    """Fraction of positions where `other`'s argmax equals the `reference` tokens (count, L)."""
    return float((_greedy_tokens(other, windows, batch_size) == reference).float().mean())


def _round_trip_half(model: nn.Module) -> nn.Module:
    """Round the weights through float16, as they are shipped, so numbers match the files."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(parameter.half().float())
    return model


def save_model(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, folder: Path) -> None:
    """A new HF folder: float16 weights, config and tokenizer."""
    folder.mkdir(parents=True)
    _save_weights(model, folder)
    tokenizer.save_pretrained(str(folder))


def _save_weights(model: LlamaForCausalLM, folder: Path) -> None:
    """The model's config and float16 weights into `folder` (the model stays float32)."""
    model.to(torch.float16).save_pretrained(str(folder), safe_serialization=True)
    model.to(torch.float32)


def train_family(recipe: Recipe, out: Path, seed: int = 0, log: Log = print) -> FamilyReport:
    """Run `recipe` with `seed` and write the family into `out` (which must not exist)."""
    clock: dict[str, float] = {}
    with building(out) as work, torch_threads(recipe.threads):
        started = time.perf_counter()
        split = split_stdlib(held_out_every=recipe.held_out_every)
        train_texts = read_texts(split.root, split.train, recipe.max_train_chars)
        validation_texts = read_texts(split.root, split.validation)
        tokenizer = train_tokenizer(train_texts, recipe.vocab_size)
        train = torch.from_numpy(encode_corpus(tokenizer, train_texts))
        validation = torch.from_numpy(encode_corpus(tokenizer, validation_texts))
        clock["tokenizer"] = time.perf_counter() - started
        log(f"corpus: {len(split.train)} train files ({train.numel()} tokens), "
            f"{len(split.validation)} held-out files ({validation.numel()} tokens)")
        eos = tokenizer.eos_token_id
        vocab = len(tokenizer)

        started = time.perf_counter()
        target, drafter = train_pair(recipe, train, recipe.target.config(vocab, recipe.max_context, eos),
                                     recipe.drafter.config(vocab, recipe.max_context, eos), seed, log)
        _round_trip_half(target)
        clock["training"] = time.perf_counter() - started
        windows = eval_windows(validation, recipe.seq_len, recipe.eval_batches * 8)
        refined = None
        if recipe.drafter_refine is not None:
            refined = refine_drafter(target, drafter, train, validation, recipe.drafter_refine,
                                     eval_windows_count=windows.shape[0], seed=seed, log=log)
            clock["refine"] = refined.seconds
        _round_trip_half(drafter)
        save_model(target, tokenizer, work / TARGET)
        save_model(drafter, tokenizer, work / DRAFTER)

        started = time.perf_counter()
        variants = family_members(target, drafter, recipe.early_exit_layers)
        losses = {name: validation_loss(model, windows) for name, model in variants.items()}
        reference = _greedy_tokens(target, windows)
        agreement = {
            name: _agreement_with(reference, model, windows)
            for name, model in variants.items() if name != TARGET
        }
        clock["evaluation"] = time.perf_counter() - started
        report = FamilyReport(
            recipe=recipe.name,
            seed=seed,
            parameters={TARGET: sum(p.numel() for p in target.parameters()),
                        DRAFTER: sum(p.numel() for p in drafter.parameters())},
            validation_loss=losses,
            greedy_agreement_with_target=agreement,
            train_tokens=int(train.numel()),
            validation_tokens=int(validation.numel()),
            wall_seconds=clock,
            refine=refined,
        )
        payload = {"report": asdict(report), "recipe": asdict(recipe),
                   "eval_windows": {"count": int(windows.shape[0]), "seq_len": recipe.seq_len}}
        (work / FAMILY_FILE).write_text(json.dumps(payload, indent=2) + "\n")
        log(json.dumps(asdict(report), indent=2))
    return report


def refine_family(family: Path, out: Path, refinement: Refinement, *, seed: int = 0, threads: int = 1, log: Log = print) -> RefineMetrics:
    """A copy of the family in `family` with its drafter refined, written into `out` through
    `building`; its `family.json` records the refinement and the drafter's new held-out numbers."""
    family, out = Path(family), Path(out)
    meta_path = family / FAMILY_FILE
    if not meta_path.is_file():
        raise PolyplanError(f"--family: {family} has no {FAMILY_FILE}; train one with `polyplan zoo train`")
    payload = json.loads(meta_path.read_text())
    recipe = payload["recipe"]
    with building(out) as work, torch_threads(threads):
        shutil.copytree(family, work, dirs_exist_ok=True)
        tokenizer = AutoTokenizer.from_pretrained(family / TARGET, local_files_only=True)  # to encode the corpus
        target = LlamaForCausalLM.from_pretrained(family / TARGET, dtype=torch.float32).eval()
        drafter = LlamaForCausalLM.from_pretrained(family / DRAFTER, dtype=torch.float32)
        split = split_stdlib(held_out_every=recipe["held_out_every"])
        train = torch.from_numpy(encode_corpus(tokenizer, read_texts(split.root, split.train, recipe["max_train_chars"])))
        validation = torch.from_numpy(encode_corpus(tokenizer, read_texts(split.root, split.validation)))
        windows = eval_windows(validation, recipe["seq_len"], payload["eval_windows"]["count"])
        metrics = refine_drafter(target, drafter, train, validation, refinement,
                                 eval_windows_count=payload["eval_windows"]["count"], seed=seed, log=log)
        _round_trip_half(drafter)
        _save_weights(drafter, work / DRAFTER)  # the tokenizer files stay the copied ones
        report = payload["report"]
        report["validation_loss"][DRAFTER] = validation_loss(drafter, windows)
        # on the same 256-token windows as every other variant of the table
        report["greedy_agreement_with_target"][DRAFTER] = _agreement_with(_greedy_tokens(target, windows), drafter, windows)
        report["wall_seconds"]["refine"] = metrics.seconds
        report["refine"] = asdict(metrics)
        recipe["drafter_refine"] = asdict(refinement)
        (work / FAMILY_FILE).write_text(json.dumps(payload, indent=2) + "\n")
    return metrics


@contextmanager
def building(out: Path) -> Iterator[Path]:
    """An empty hidden sibling folder of `out` (which must not exist), renamed to `out` when
    the block ends normally and removed when it raises (Ctrl-C included), so that a folder
    named `out` is always complete."""
    out = Path(out)
    if out.exists():
        raise PolyplanError(f"--out: {out} already exists; choose a new folder")
    work = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        yield work
        os.replace(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's intra-op thread count set to `count` for the block, restored after."""
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
