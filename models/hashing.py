"""Fingerprints: short stable hashes of model files, in-memory weights and settings.

The profiler stores one with every entry (a model's latency curve, a pair's α, each decoded
μ) and reuses the entry on a later run only when the fingerprint it computes now is equal.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

_PREFIX = "sha256:"
_CHUNK = 1 << 20


def fingerprint_files(paths: Iterable[str | Path]) -> str:
    """Hash of the contents of files (folders are walked; paths are hashed relative to each root)."""
    digest = hashlib.sha256()
    for root in sorted(Path(p) for p in paths):
        files = sorted(f for f in root.rglob("*") if f.is_file()) if root.is_dir() else [root]
        for file in files:
            relative = file.relative_to(root).as_posix() if root.is_dir() else file.name
            digest.update(relative.encode() + b"\0")
            with file.open("rb") as stream:
                while chunk := stream.read(_CHUNK):
                    digest.update(chunk)
            digest.update(b"\0")
    return _PREFIX + digest.hexdigest()[:32]


def fingerprint_module(module: torch.nn.Module) -> str:
    """Hash of a module's class, config (if any) and every tensor in its state dict."""
    digest = hashlib.sha256(type(module).__qualname__.encode())
    config = getattr(module, "config", None)
    if config is not None and hasattr(config, "to_json_string"):
        digest.update(config.to_json_string(use_diff=False).encode())
    for name, value in sorted(module.state_dict().items()):
        digest.update(name.encode())
        for tensor in _tensors(value):
            for part in _plain(tensor):
                data = part.detach().cpu().contiguous().reshape(-1)
                digest.update(str(data.dtype).encode() + repr(tuple(part.shape)).encode())
                digest.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return _PREFIX + digest.hexdigest()[:32]


def _plain(tensor: torch.Tensor) -> list[torch.Tensor]:
    """A quantized tensor as its integer values plus its scales and zero points."""
    if not tensor.is_quantized:
        return [tensor]
    if tensor.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        scales = torch.tensor([tensor.q_scale(), float(tensor.q_zero_point())], dtype=torch.float64)
        return [tensor.int_repr(), scales]
    return [tensor.int_repr(), tensor.q_per_channel_scales(), tensor.q_per_channel_zero_points()]


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    return []


def fingerprint_settings(*parts: Any) -> str:
    """Hash of JSON-serialisable parts (dict keys sorted, floats written by repr)."""
    text = json.dumps(parts, sort_keys=True, default=_default, separators=(",", ":"))
    return _PREFIX + hashlib.sha256(text.encode()).hexdigest()[:32]


def fingerprint_tokens(sequences: Sequence[Sequence[int]]) -> str:
    """Hash of token-id sequences (the prompt set as the models see it)."""
    digest = hashlib.sha256()
    for sequence in sequences:
        digest.update(",".join(map(str, sequence)).encode() + b";")
    return _PREFIX + digest.hexdigest()[:32]


def _default(value: Any) -> Any:
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    if isinstance(value, Path):
        return value.as_posix()
    raise TypeError(f"cannot fingerprint {type(value).__name__}")
