"""A reduced-vocabulary drafter: its LM head covers only a subset S of the target's tokens (the N
most frequent, FR-Spec style), skipping most of a small model's step, which its head dominates.

Why the chain stays lossless: the drafter's p is zero outside S (`restrict_logits` puts −inf
there, so nothing outside S is drafted). The verifier q accepts a drafted x with
min(1, q(x)/p(x)) and on rejection samples from norm(max(0, q − p)), which holds all of q's mass
outside S: the emitted token is distributed as q, and only the acceptance rate drops. (Restricting
the VERIFIER to S instead would be lossy: the negative control of the tests.)

Shapes: V the full vocabulary, N = |S|, H the hidden size.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from polyplan.decoder.shallow_copy import shallow_copy
from polyplan.formats.errors import PolyplanError

REDUCED_VOCAB_FILE = "polyplan-reduced-vocab.json"  # in a model folder: {"kept_ids": [...], ...}
REDUCED_HEAD_FILE = "polyplan-reduced-head.safetensors"  # optional: the kept rows of the head, {"weight": (N, H)}


def restrict_logits(subset_logits: torch.Tensor, keep: torch.Tensor, vocab: int) -> torch.Tensor:
    """Full-vocabulary logits (..., V) from logits over the kept ids (..., N): −inf elsewhere."""
    full = torch.full((*subset_logits.shape[:-1], vocab), -torch.inf, dtype=subset_logits.dtype, device=subset_logits.device)
    return full.index_copy_(-1, keep, subset_logits)


class SubsetHead(nn.Module):
    """An LM head over the token ids `keep` only, returning full-vocabulary logits (−inf outside);
    `out_features` is V, so the model still reports V logit rows to the vocabulary check."""

    def __init__(self, weight: torch.Tensor, keep: torch.Tensor, vocab: int, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        if weight.dim() != 2 or weight.shape[0] != keep.numel():
            raise PolyplanError(f"reduced head: {keep.numel()} kept ids need a ({keep.numel()}, H) weight, got {tuple(weight.shape)}")
        self.weight = nn.Parameter(weight)  # (N, H)
        self.bias = None if bias is None else nn.Parameter(bias)  # (N,)
        self.register_buffer("keep", keep.to(torch.int64))  # (N,)
        self.in_features = int(weight.shape[1])
        self.out_features = int(vocab)
        self.compact = False  # True: return the N kept columns only (`compact_logits`)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = nn.functional.linear(hidden, self.weight, self.bias)  # (..., N)
        if self.compact:
            return logits
        return restrict_logits(logits, self.keep, self.out_features)  # (..., V)


@contextmanager
def compact_logits(*models: nn.Module) -> Iterator[None]:
    """Within the block, models with a `SubsetHead` return logits over their kept ids only,
    (..., N) instead of (..., V) with −inf elsewhere: training on a 262k vocabulary then moves
    8k columns, not 262k. Their kept ids must be the same, so the columns line up."""
    heads = [model.get_output_embeddings() for model in models]
    if not all(isinstance(head, SubsetHead) for head in heads):
        raise PolyplanError("compact logits: every model needs a reduced head")
    if any(not torch.equal(head.keep, heads[0].keep) for head in heads[1:]):
        raise PolyplanError("compact logits: the models keep different ids")
    for head in heads:
        head.compact = True
    try:
        yield
    finally:
        for head in heads:
            head.compact = False


def most_frequent_tokens(token_ids: Iterable[int] | torch.Tensor, vocab: int, n: int, *, always: Iterable[int] = ()) -> torch.Tensor:
    """The `n` most frequent ids of `token_ids` (ties: lower id first), always including the ids
    in `always` (e.g. EOS, so the drafter can end an answer); sorted, shape (n,). PolyplanError
    when `n` is not in [len(always), vocab]."""
    always = sorted(set(int(i) for i in always))
    if not len(always) <= n <= vocab:
        raise PolyplanError(f"reduced vocabulary: N = {n} must lie in [{len(always)}, {vocab}]")
    ids = torch.as_tensor(list(token_ids) if not isinstance(token_ids, torch.Tensor) else token_ids, dtype=torch.int64)
    counts = torch.bincount(ids.reshape(-1), minlength=vocab)[:vocab].to(torch.float64)
    counts[always] = torch.inf  # first in line
    order = torch.argsort(-counts, stable=True)  # descending count, lower id first among ties
    return order[:n].sort().values


def restrict_head(model: nn.Module, keep: torch.Tensor) -> nn.Module:
    """A shallow copy of HF causal LM `model` whose head is the rows `keep` of its own."""
    head = model.get_output_embeddings()
    if head is None or not hasattr(head, "weight"):
        raise PolyplanError(f"reduced head: {type(model).__name__} has no linear LM head")
    vocab = int(head.weight.shape[0])
    keep = keep.to(torch.int64)
    if keep.numel() == 0 or int(keep.min()) < 0 or int(keep.max()) >= vocab:
        raise PolyplanError(f"reduced head: kept ids must be a non-empty subset of [0, {vocab})")
    bias = getattr(head, "bias", None)
    with torch.no_grad():
        reduced = SubsetHead(head.weight[keep].clone(), keep, vocab, None if bias is None else bias[keep].clone())
    shallow = shallow_copy(model)
    shallow.set_output_embeddings(reduced)
    return shallow


def with_saved_subset(model: nn.Module, folder: str | Path) -> nn.Module:
    """`model` loaded from `folder`, with the reduced head its `REDUCED_VOCAB_FILE` records (as
    `polyplan drafter distill` writes), rows from `REDUCED_HEAD_FILE` (a trained head) or its own."""
    path = Path(folder) / REDUCED_VOCAB_FILE
    if not path.is_file():
        return model
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))["kept_ids"]
        keep = torch.tensor(kept, dtype=torch.int64)
    except (ValueError, KeyError, TypeError) as error:
        raise PolyplanError(f"{path}: not a reduced-vocabulary record ({error})") from None
    reduced = restrict_head(model, keep)
    head_path = Path(folder) / REDUCED_HEAD_FILE
    if head_path.is_file():
        head = reduced.get_output_embeddings()
        weight = _saved_head_weight(head_path)
        if weight.shape != head.weight.shape:
            raise PolyplanError(f"{head_path}: a {tuple(weight.shape)} head for {tuple(head.weight.shape)} kept rows")
        with torch.no_grad():
            head.weight.copy_(weight)
    return reduced


def save_reduced_head(folder: str | Path, model: nn.Module) -> None:
    """Write the kept rows of `model`'s `SubsetHead` to `folder / REDUCED_HEAD_FILE`."""
    from safetensors.torch import save_file

    head = model.get_output_embeddings()
    if not isinstance(head, SubsetHead):
        raise PolyplanError(f"reduced head: {type(model).__name__} has no reduced head to save")
    save_file({"weight": head.weight.detach().float().contiguous()}, str(Path(folder) / REDUCED_HEAD_FILE))


def _saved_head_weight(path: Path) -> torch.Tensor:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))["weight"]
    except (SafetensorError, KeyError, OSError) as error:
        raise PolyplanError(f"{path}: not a reduced head ({error})") from None
