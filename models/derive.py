"""Derived variants of a Hugging Face causal LM: quantized copies and an early-exit copy
(docs/models-yaml.md, "Derived copies"). Which precision has a fast kernel where is decided in
`polyplan.formats.candidates.supported_quantization`, so the schema check agrees; whether this CPU
multiplies bf16 natively is checked here, where torch can tell.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from polyplan.formats.candidates import supported_quantization
from polyplan.models.int8_head import int8_head_model, quantize_dynamic_quietly
from polyplan.decoder.shallow_copy import shallow_copy
from polyplan.formats.errors import PolyplanError


def quantize_model(model: nn.Module, kind: str, device: str = "cpu", head: str | None = None) -> nn.Module:
    """A quantized copy of `model`: int8 (torch's dynamic quantization of every `nn.Linear`, the
    path with a fast CPU kernel), int8-head (`models.int8_head`) or bf16; `head="int8"` puts
    int8-head's head on an int8 or bf16 copy, its exact logits from `model`'s float32 head."""
    reason = supported_quantization(kind, device)
    if reason is None and kind == "bf16" and not device.startswith("cuda") and not cpu_has_fast_bf16():
        reason = "this CPU has no native bf16 matmul (AVX512-BF16 or AMX), so bf16 runs slower than float32"
    if reason is not None:
        raise PolyplanError(f"quantize: {kind} on {device}: {reason}")
    if kind == "int8-head":
        return int8_head_model(model)
    if kind == "bf16":
        quantized = copy.deepcopy(model).to(torch.bfloat16)
    elif head is None:
        return quantize_dynamic_quietly(copy.deepcopy(model).float())
    else:  # int8 layers; the head is int8-head's, so the float32 head is neither copied nor quantized
        float_head = [p for p in model.get_output_embeddings().parameters() if p.dtype == torch.float32]
        quantized = copy.deepcopy(model, memo={id(p): p for p in float_head}).float()  # shares them
        for child in quantized.children():
            if child is not quantized.get_output_embeddings():
                quantize_dynamic_quietly(child, inplace=True)
    return quantized if head is None else int8_head_model(quantized, exact=model.get_output_embeddings())


def cpu_has_fast_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices natively (oneDNN's check: AVX512-BF16 or AMX)."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def num_layers(model: nn.Module) -> int:
    """The number of decoder layers of an HF causal LM."""
    return int(model.config.num_hidden_layers)


def early_exit_model(model: nn.Module, layers: int) -> nn.Module:
    """A copy of `model` that runs only its first `layers` decoder layers, the final norm and the
    head, SHARING their weights: HF decoder models iterate `self.layers[:num_hidden_layers]`, so
    a shallow copy with a shorter layer list and config is a complete model."""
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
