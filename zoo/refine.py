"""Refining the drafter against the finished, frozen target (`refine_drafter`): the loss is
TV(p, q) + KL(p || q), since alpha at temperature 1 is 1 - E[TV] and the KL keeps the gradient alive
where q misses the target's choice (docs/models-yaml.md, "The embedded family"). Only the drafter
learns, so the target's weights, and every fingerprint and profile entry that depends on them, stay
exactly as they were.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from polyplan.zoo.optim import adamw, eval_windows, learning_rate, optimizer_step, random_windows
from polyplan.zoo.recipe import Refinement

Log = Callable[[str], None]


@dataclass(frozen=True)
class DrafterFit:
    """The drafter under the target on one set of held-out windows: alpha at temperature 1
    (mean of sum(min(p, q)) over positions) and greedy agreement (argmaxes equal)."""

    alpha: float
    agreement: float


@dataclass(frozen=True)
class RefineMetrics:
    """The drafter before and after refining, on held-out corpus windows and on held-out
    on-policy windows (the target's continuations of held-out prompts), and the time taken."""

    corpus_before: DrafterFit
    corpus_after: DrafterFit
    on_policy_before: DrafterFit
    on_policy_after: DrafterFit
    generation_seconds: float  # writing the on-policy evaluation windows
    seconds: float  # distilling


def distillation_loss(target_logits: torch.Tensor, drafter_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(TV + KL, TV) averaged over positions; both logits are (N, V), the target's detached.

    A reduced-vocabulary drafter has −inf logits outside its kept tokens (q = 0 there): the KL
    term is summed over its support only (the target's mass outside it is in TV already, and
    a drafter cannot move it), so the loss stays finite."""
    log_p = F.log_softmax(target_logits.float(), dim=-1)
    log_q = F.log_softmax(drafter_logits.float(), dim=-1)
    p, q = log_p.exp(), log_q.exp()
    tv = 0.5 * (p - q).abs().sum(-1).mean()
    kl = torch.where(torch.isfinite(log_q), p * (log_p - log_q), 0.0).sum(-1).mean()
    return tv + kl, tv


@torch.inference_mode()
def acceptance_on(target: nn.Module, drafter: nn.Module, windows: torch.Tensor, batch_size: int = 8) -> DrafterFit:
    """`DrafterFit` of `drafter` under `target` on `windows` (count, L + 1); at most `batch_size`
    windows go at once, fewer where the vocabulary is large (each probability tensor stays under
    2^26 entries)."""
    head = target.get_output_embeddings()
    vocab = int(getattr(head, "out_features", head.weight.shape[0]))
    batch_size = max(1, min(batch_size, (1 << 26) // max(1, (windows.shape[1] - 1) * vocab)))
    overlap, agree, count = 0.0, 0.0, 0
    for chunk in windows.split(batch_size):
        inputs = chunk[:, :-1]
        p = F.softmax(target(inputs).logits.float(), dim=-1)
        q = F.softmax(drafter(inputs).logits.float(), dim=-1)
        overlap += torch.minimum(p, q).sum(-1).sum().item()
        agree += (p.argmax(-1) == q.argmax(-1)).sum().item()
        count += inputs.numel()
    return DrafterFit(overlap / count, agree / count)


@torch.inference_mode()
def greedy_continuations(target: nn.Module, prompts: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """`prompts` (B, P) followed by `new_tokens` tokens the target picks greedily, past any
    end-of-text token (the corpus joins files with it): shape (B, P + new_tokens)."""
    from transformers import DynamicCache

    from polyplan.decoder.hf import cache_keyword

    cache = {cache_keyword(target): DynamicCache(config=target.config)}
    logits = target(prompts, use_cache=True, **cache).logits[:, -1]  # (B, V)
    pieces = [prompts]
    for index in range(new_tokens):
        token = logits.argmax(-1, keepdim=True)  # (B, 1)
        pieces.append(token)
        if index < new_tokens - 1:
            logits = target(token, use_cache=True, **cache).logits[:, -1]
    return torch.cat(pieces, dim=1)


def refine_drafter(target: nn.Module, drafter: nn.Module, train: torch.Tensor, validation: torch.Tensor,
                   refinement: Refinement, *, eval_windows_count: int, seed: int, log: Log,
                   teacher: nn.Module | None = None) -> RefineMetrics:
    """Distil `drafter` (in place) from the frozen `target` on windows of the `train` stream, scored
    before and after on `eval_windows_count` windows of `validation` and on as many on-policy ones.

    `teacher` (default: `target`) gives the training logits, e.g. the target with its head
    restricted to a reduced-vocabulary drafter's kept ids; the scores always use `target`. When
    both heads are reduced over the same ids, the loss is computed over those columns only
    (`compact_logits`): the same loss, since both are −inf elsewhere, in a fraction of the time.
    """
    teacher = target if teacher is None else teacher
    compact = _compact_if_both_reduced(teacher, drafter)
    schedule, window = refinement.schedule, refinement.window
    target.eval()
    started = time.perf_counter()
    corpus = eval_windows(validation, window - 1, eval_windows_count)  # (count, window)
    prompt = refinement.eval_prompt_tokens
    on_policy = torch.cat([greedy_continuations(target, chunk[:, :prompt], refinement.eval_continuation_tokens)
                           for chunk in corpus.split(16)])  # (count, prompt + continuation)
    generation_seconds = time.perf_counter() - started
    corpus_before, on_policy_before = acceptance_on(target, drafter.eval(), corpus), acceptance_on(target, drafter, on_policy)
    log(f"refine: before, {_fit_line(corpus_before, on_policy_before)}")
    drafter.train()
    drafter_optimizer = adamw(drafter, schedule)
    generator = torch.Generator().manual_seed(seed + 2)
    started = time.perf_counter()
    for index in range(schedule.steps):
        inputs = random_windows(train, window - 1, schedule.batch_size, generator)[:, :-1]  # (B, window - 1)
        with compact():
            with torch.no_grad():
                teacher_logits = teacher(inputs).logits.flatten(0, 1)  # (B*L, V), or (B*L, N) compact
            loss, tv = distillation_loss(teacher_logits, drafter(inputs).logits.flatten(0, 1))
        optimizer_step(drafter, drafter_optimizer, loss, learning_rate(index, schedule))
        if index % 25 == 0 or index == schedule.steps - 1:
            log(f"refine step {index}/{schedule.steps} tv {tv.item():.3f} loss {loss.item():.3f} "
                f"({time.perf_counter() - started:.0f}s)")
    seconds = time.perf_counter() - started
    drafter.eval()
    corpus_after, on_policy_after = acceptance_on(target, drafter, corpus), acceptance_on(target, drafter, on_policy)
    log(f"refine: after, {_fit_line(corpus_after, on_policy_after)}")
    return RefineMetrics(corpus_before, corpus_after, on_policy_before, on_policy_after, generation_seconds, seconds)


def _compact_if_both_reduced(teacher: nn.Module, drafter: nn.Module):
    """`compact_logits(teacher, drafter)` where both have reduced heads over the same ids,
    else a context that changes nothing."""
    from contextlib import nullcontext
    from functools import partial

    from polyplan.models.reduced_vocab import SubsetHead, compact_logits

    heads = [teacher.get_output_embeddings(), drafter.get_output_embeddings()]
    if all(isinstance(head, SubsetHead) for head in heads) and torch.equal(heads[0].keep, heads[1].keep):
        return partial(compact_logits, teacher, drafter)
    return nullcontext


def _fit_line(corpus: DrafterFit, on_policy: DrafterFit) -> str:
    return (f"corpus alpha {corpus.alpha:.3f} agreement {corpus.agreement:.3f}; "
            f"on-policy alpha {on_policy.alpha:.3f} agreement {on_policy.agreement:.3f}")
