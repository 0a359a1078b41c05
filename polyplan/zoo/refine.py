"""Refining the drafter against the finished target: offline distillation, the target frozen.

`train.train_pair` distils the drafter *online*, from a target that is still learning: what
the drafter matches early on is a target that no longer exists at the end. This stage
continues from that drafter with the final target as a fixed teacher, on random windows of
the training corpus. Its loss is aimed at what speculative decoding pays for:

- the total variation distance TV(p, q) = 1 - sum(min(p, q)), because the acceptance rate at
  temperature 1 is exactly alpha = 1 - E[TV(p, q)] (p the target's, q the drafter's
  next-token distribution);
- plus the forward KL(p || q), which keeps the gradient informative where q puts almost no
  mass on the target's choice (TV's gradient is flat there), and so serves greedy agreement.

Only the drafter's forward and backward pass and the target's forward pass run per step, so
the target's weights (and every fingerprint and profile entry that depends on them) stay
exactly as they were.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from polyplan.zoo.optim import adamw, learning_rate, optimizer_step, random_windows
from polyplan.zoo.recipe import Schedule

Log = Callable[[str], None]


@dataclass(frozen=True)
class RefineMetrics:
    """The drafter against the target on held-out windows, before and after refining."""

    alpha_before: float
    alpha_after: float
    agreement_before: float
    agreement_after: float
    seconds: float


def distillation_loss(target_logits: torch.Tensor, drafter_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(TV + KL, TV) averaged over positions; both logits are (N, V), the target's detached."""
    log_p = F.log_softmax(target_logits.float(), dim=-1)
    log_q = F.log_softmax(drafter_logits.float(), dim=-1)
    p, q = log_p.exp(), log_q.exp()
    tv = 0.5 * (p - q).abs().sum(-1).mean()
    kl = (p * (log_p - log_q)).sum(-1).mean()
    return tv + kl, tv


@torch.inference_mode()
def acceptance_on(target: nn.Module, drafter: nn.Module, windows: torch.Tensor, batch_size: int = 8) -> tuple[float, float]:
    """(alpha at temperature 1, greedy agreement) of `drafter` under `target` on `windows`.

    alpha = mean over positions of sum(min(p, q)); agreement = fraction of positions where the
    argmaxes agree. `windows` is (count, L + 1) held-out token ids.
    """
    overlap, agree, count = 0.0, 0.0, 0
    for chunk in windows.split(batch_size):
        inputs = chunk[:, :-1]
        p = F.softmax(target(inputs).logits.float(), dim=-1)
        q = F.softmax(drafter(inputs).logits.float(), dim=-1)
        overlap += torch.minimum(p, q).sum(-1).sum().item()
        agree += (p.argmax(-1) == q.argmax(-1)).sum().item()
        count += inputs.numel()
    return overlap / count, agree / count


def refine_drafter(
    target: nn.Module,
    drafter: nn.Module,
    train: torch.Tensor,
    validation: torch.Tensor,
    schedule: Schedule,
    *,
    seq_len: int,
    seed: int,
    log: Log,
) -> RefineMetrics:
    """Distil `drafter` (in place) from the frozen `target` for `schedule.steps` batches.

    `train` is the token stream batches are cut from; `validation` is (count, L + 1)
    held-out windows for the before/after numbers.
    """
    target.eval()
    alpha_before, agreement_before = acceptance_on(target, drafter.eval(), validation)
    log(f"refine: before, alpha {alpha_before:.3f}, greedy agreement {agreement_before:.3f}")
    drafter.train()
    drafter_optimizer = adamw(drafter, schedule)
    generator = torch.Generator().manual_seed(seed + 2)
    started = time.perf_counter()
    for index in range(schedule.steps):
        batch = random_windows(train, seq_len, schedule.batch_size, generator)
        inputs = batch[:, :-1]  # (B, L)
        with torch.inference_mode():
            teacher = target(inputs).logits.flatten(0, 1)  # (B*L, V)
        loss, tv = distillation_loss(teacher.clone(), drafter(inputs).logits.flatten(0, 1))
        optimizer_step(drafter, drafter_optimizer, loss, learning_rate(index, schedule))
        if index % 25 == 0 or index == schedule.steps - 1:
            log(f"refine step {index}/{schedule.steps} tv {tv.item():.3f} loss {loss.item():.3f} "
                f"({time.perf_counter() - started:.0f}s)")
    seconds = time.perf_counter() - started
    drafter.eval()
    alpha_after, agreement_after = acceptance_on(target, drafter, validation)
    log(f"refine: after, alpha {alpha_after:.3f}, greedy agreement {agreement_after:.3f}")
    return RefineMetrics(alpha_before, alpha_after, agreement_before, agreement_after, seconds)

