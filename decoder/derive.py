"""Derived variants of a Hugging Face causal LM: an int8 copy and an early-exit copy.

Which reduced precision has a fast kernel on which device is decided in one place,
`polyplan.formats.candidates.supported_quantization`, so the schema check and this module agree:
int8 (dynamic, per-tensor weights) and int8-head (the LM head only) on CPU; bf16 on CUDA;
int4 nowhere with plain torch.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from polyplan.formats.candidates import supported_quantization
from polyplan.decoder.int8_head import int8_head_model, quantize_dynamic_quietly
from polyplan.decoder.reduced_vocab import shallow_copy
from polyplan.formats.errors import PolyplanError


def quantize_model(model: nn.Module, kind: str, device: str = "cpu") -> nn.Module:
    """A quantized copy of `model` (the original is left untouched).

    int8 is torch's dynamic quantization of every `nn.Linear` (weights int8 per tensor,
    activations quantized on the fly), the path with a fast CPU kernel. int8-head quantizes
    only the LM head that way and recomputes its top logits exactly (`decoder.int8_head`; the
    copy shares every other weight with `model`).
    """
    reason = supported_quantization(kind, device)
    if reason is not None:
        raise PolyplanError(f"quantize: {kind} on {device}: {reason}")
    if kind == "int8-head":
        return int8_head_model(model)
    if kind == "bf16":
        return copy.deepcopy(model).to(torch.bfloat16)
    return quantize_dynamic_quietly(copy.deepcopy(model).float())


def num_layers(model: nn.Module) -> int:
    """The number of decoder layers of a Llama-style HF causal LM."""
    return int(model.config.num_hidden_layers)


def early_exit_model(model: nn.Module, layers: int) -> nn.Module:
    """A copy of `model` that runs only its first `layers` decoder layers.

    The copy keeps the final norm and the LM head and SHARES the kept layers' weights with
    `model` (no extra memory). HF decoder models iterate `self.layers[:num_hidden_layers]`,
    so a shallow copy with a shorter layer list and config is a complete model.
    """
    total = num_layers(model)
    if not 1 <= layers <= total:
        raise PolyplanError(f"layers: {layers} is outside 1..{total} (the model has {total} layers)")
    inner_name = getattr(model, "base_model_prefix", "model")
    inner = getattr(model, inner_name, None)
    if inner is None or not hasattr(inner, "layers"):
        raise PolyplanError(f"layers: model {type(model).__name__} has no decoder layer list")
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = list(config.layer_types)[:layers]
    shallow_inner = shallow_copy(inner)  # the original is untouched
    shallow_inner._modules["layers"] = nn.ModuleList(list(inner.layers)[:layers])
    shallow_inner.config = config
    shallow = shallow_copy(model)
    shallow._modules[inner_name] = shallow_inner
    shallow.config = config
    return shallow
