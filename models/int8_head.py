"""`quantize: int8-head` (`int8_head_model`): a copy whose LM head runs torch's dynamic int8 kernel
(the fast CPU path for what is most of a small model's step), its `top` largest logits recomputed
in float32 from the original weights, since int8 alone swaps near-ties: its argmax is the float32
one unless that token is not even among the int8 top. Everything but the int8 head is shared with
the base. As a chain member it is a model of its own, so the chain stays lossless whatever it is.
docs/models-yaml.md, "Derived copies".
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from polyplan.decoder.shallow_copy import shallow_copy
from polyplan.formats.errors import PolyplanError

_DEFAULT_RESCORED = 32  # top logits recomputed exactly (docs/models-yaml.md)


class RescoredInt8Head(nn.Module):
    """A linear LM head: dynamic int8 logits, the `top` largest of each row recomputed in float32
    from the float32 `nn.Linear` `head` (its weight referenced, not copied)."""

    def __init__(self, head: nn.Linear, top: int = _DEFAULT_RESCORED) -> None:
        super().__init__()
        if top < 1:
            raise ValueError(f"top: must be >= 1, got {top}")
        self.in_features, self.out_features = head.in_features, head.out_features
        self.top = min(top, head.out_features)
        self.int8 = quantize_dynamic_quietly(nn.Sequential(_float_copy_sharing_nothing(head)))
        self.exact_weight = head.weight  # (V, H), the base's (shared, e.g. tied with the embeddings)
        self.exact_bias = head.bias  # (V,) or None

    @property
    def weight(self) -> torch.Tensor:
        """The float32 weight (what `get_output_embeddings().weight` callers expect)."""
        return self.exact_weight

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = hidden.float()
        logits = self.int8(hidden)  # (..., V)
        top = logits.topk(self.top, dim=-1).indices  # (..., top)
        exact = torch.einsum("...h,...kh->...k", hidden, self.exact_weight[top].float())  # (..., top)
        if self.exact_bias is not None:
            exact = exact + self.exact_bias[top]
        return logits.scatter(-1, top, exact.to(logits.dtype))


def quantize_dynamic_quietly(module: nn.Module, inplace: bool = False) -> nn.Module:
    """torch's dynamic int8 quantization of every `nn.Linear` in `module` (a deep copy, or in place),
    one weight scale per output channel (docs/models-yaml.md), without the warnings that deprecate
    the eager API in favour of torchao (not installed): it is still the int8 path with a fast CPU kernel."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.ao.quantization is deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message="torch.quantize_per_tensor, torch.quantize_per_channel", category=UserWarning)
        per_channel = {nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig}
        return torch.ao.quantization.quantize_dynamic(module, per_channel, dtype=torch.qint8, inplace=inplace)


def _float_copy_sharing_nothing(head: nn.Linear) -> nn.Linear:
    """A float32 copy of `head` for the quantizer (which replaces modules, not tensors)."""
    fresh = nn.Linear(head.in_features, head.out_features, bias=head.bias is not None, device="meta")
    fresh.weight = nn.Parameter(head.weight.detach().float().clone(), requires_grad=False)
    if head.bias is not None:
        fresh.bias = nn.Parameter(head.bias.detach().float().clone(), requires_grad=False)
    return fresh


def int8_head_model(model: nn.Module, top: int = _DEFAULT_RESCORED, exact: nn.Linear | None = None) -> nn.Module:
    """A shallow copy of HF causal LM `model` with a `RescoredInt8Head` made from `exact` (default:
    `model`'s own head; the original's for a bf16 or int8 copy)."""
    head = model.get_output_embeddings()
    exact = head if exact is None else exact
    for what in (head, exact):
        if not isinstance(what, nn.Linear):
            raise PolyplanError(f"int8-head: the model's LM head is a {type(what).__name__}, not a linear layer")
    names = [key for key, module in model._modules.items() if module is head]
    if not names:
        raise PolyplanError(f"int8-head: the LM head of {type(model).__name__} is not one of its direct submodules")
    shallow = shallow_copy(model)  # the original is untouched
    shallow._modules[names[0]] = RescoredInt8Head(exact, top)
    return shallow
