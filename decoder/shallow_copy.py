"""A shallow copy of a torch model whose submodules can be replaced without touching the original:
what model surgery (`models.reduced_vocab`, `models.int8_head`, `models.derive`) and the
tall-skinny head (`decoder.tall_skinny_head`) hand back, since the original is often shared with
another chain member."""

from __future__ import annotations

import copy

from torch import nn


def shallow_copy(model: nn.Module) -> nn.Module:
    """`model`'s weights and submodules, shared, in its own `_modules` dict and hook tables (a
    hook later registered on `model`, a profiler counting the target's passes, does not fire for
    the copy, nor the reverse). On a `device_map` model accelerate's hook is re-attached: the
    copied `forward` is bound to the ORIGINAL module, so replaced submodules would never run."""
    shallow = copy.copy(model)
    shallow._modules = dict(model._modules)
    for name, value in model.__dict__.items():
        is_hook_table = name.endswith("_hooks") or "_hooks_" in name  # _forward_hooks, _forward_pre_hooks_with_kwargs, ...
        if is_hook_table and isinstance(value, dict):
            shallow.__dict__[name] = copy.copy(value)
    hook = shallow.__dict__.get("_hf_hook")
    if hook is not None:
        from accelerate.hooks import add_hook_to_module

        for key in ("forward", "_old_forward", "_hf_hook"):
            shallow.__dict__.pop(key, None)
        add_hook_to_module(shallow, hook)
    return shallow
