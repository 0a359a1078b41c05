"""The pieces both training stages share: batch sampling, the AdamW set-up, its schedule, a step."""

from __future__ import annotations

import math

import torch
from torch import nn

from polyplan.zoo.recipe import Schedule


def random_windows(stream: torch.Tensor, seq_len: int, batch: int, generator: torch.Generator) -> torch.Tensor:
    """`batch` random windows of `seq_len + 1` tokens: shape (batch, seq_len + 1)."""
    starts = torch.randint(0, stream.numel() - seq_len - 1, (batch,), generator=generator)
    offsets = torch.arange(seq_len + 1)
    return stream[starts[:, None] + offsets[None, :]].long()


def eval_windows(stream: torch.Tensor, seq_len: int, count: int) -> torch.Tensor:
    """`count` evenly spaced held-out windows (deterministic): shape (count, seq_len + 1)."""
    last = stream.numel() - seq_len - 1
    starts = torch.linspace(0, last, count).long()
    offsets = torch.arange(seq_len + 1)
    return stream[starts[:, None] + offsets[None, :]].long()


def learning_rate(step: int, schedule: Schedule) -> float:
    """Linear warm-up to the peak, then cosine decay to a tenth of it."""
    if step < schedule.warmup_steps:
        return schedule.learning_rate * (step + 1) / schedule.warmup_steps
    progress = (step - schedule.warmup_steps) / max(1, schedule.steps - schedule.warmup_steps)
    return schedule.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def adamw(model: nn.Module, schedule: Schedule) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices only (not on norms and biases)."""
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": schedule.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=schedule.learning_rate, betas=(0.9, 0.95))


def optimizer_step(model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor, lr: float) -> None:
    """One update at learning rate `lr`, gradients clipped to norm 1."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
