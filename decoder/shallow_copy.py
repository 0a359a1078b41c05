"""A shallow copy of a torch model whose submodules can be replaced without touching the original.

Model surgery (a reduced or int8 head, a copy of the first layers: `models.reduced_vocab`,
`models.int8_head`, `models.derive`) and the tall-skinny head an `HFMember` runs on a CPU
(`decoder.tall_skinny_head`) all hand back such a copy, so the model they were given, often
shared with another member of the chain, keeps its own head and hooks.
"""

from __future__ import annotations

import copy

from torch import nn


def shallow_copy(model: nn.Module) -> nn.Module:
    """A shallow copy of `model` whose submodules can be replaced without touching `model`:
    it shares every weight and submodule, but has its own `_modules` dict (where nn.Module
    keeps them), and its own hook tables, so that a forward hook registered on `model` later
    (a profiler counting the target's passes) does not fire for the copy's passes, nor the
    reverse. On a `device_map` model, accelerate's hook is re-attached to the copy: the
    copied `forward` is bound to the ORIGINAL module, so the copy's replaced submodules (a new
    head, a shorter layer list) would never run."""
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
