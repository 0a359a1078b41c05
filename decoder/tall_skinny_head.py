"""A float32 CPU LM head computed as (W hᵀ)ᵀ (`with_tall_skinny_head`): torch's CPU kernel for
`F.linear(h, W)` with a few rows of h is slow and not monotone in the row count, while `W @ hᵀ`
streams W once, so a few-token verification costs about one step (docs/cost-model.md, "A kernel
path that keeps T(k) flat"). The logits equal `F.linear`'s within float32 rounding, and every pass
uses this one head, the target-only baseline included. bf16 and CUDA kernels handle few rows well,
so only a plain float32 CPU `nn.Linear` at least `TALL` times taller than wide gets it.
"""

from __future__ import annotations

import torch
from torch import nn

from polyplan.decoder.shallow_copy import shallow_copy

TALL = 8  # vocabulary rows per hidden column from which the head is worth transposing


class TallSkinnyHead(nn.Module):
    """`nn.Linear` semantics with the product taken as `W @ hᵀ` (weights shared, not copied)."""

    def __init__(self, head: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = head.in_features, head.out_features
        self.weight = head.weight  # (V, H), shared (e.g. tied with the embeddings)
        self.bias = head.bias  # (V,) or None

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        rows = hidden.reshape(-1, self.in_features)  # (n, H)
        logits = (self.weight @ rows.T).T  # (n, V)
        if self.bias is not None:
            logits = logits + self.bias
        return logits.reshape(*hidden.shape[:-1], self.out_features)


def is_tall_cpu_head(head: object) -> bool:
    """Whether `head` is a plain float32 CPU `nn.Linear` tall enough to gain from `TallSkinnyHead`."""
    return (
        type(head) is nn.Linear
        and head.weight.dtype == torch.float32
        and head.weight.device.type == "cpu"
        and head.out_features >= TALL * head.in_features
    )


def with_tall_skinny_head(model: nn.Module) -> nn.Module:
    """`model`, or where its head qualifies a shallow copy with a `TallSkinnyHead` (never modified)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not is_tall_cpu_head(head):
        return model
    shallow = shallow_copy(model)  # as `models.reduced_vocab.restrict_head` does: the original keeps its head
    shallow.set_output_embeddings(TallSkinnyHead(head))
    return shallow
