"""The torch device a user names (`--device`, `device:` in models.yaml), checked before any
model loads: an unknown name, or CUDA on a torch built without it, is one clear line."""

from __future__ import annotations

from polyplan.formats.errors import PolyplanError


def check_device(device: str, where: str = "--device") -> str:
    """`device` if this torch can place tensors there; `PolyplanError` naming `where` if not."""
    import torch

    if not isinstance(device, str) or not device.strip():
        raise PolyplanError(f"{where}: give a device such as cpu or cuda:0, got {device!r}")
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise PolyplanError(f"{where}: {device!r} is not a torch device (use cpu, cuda or cuda:N)") from None
    if parsed.type == "cpu":
        return device
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            build = "built without CUDA" if torch.version.cuda is None else "finds no CUDA GPU"
            raise PolyplanError(f"{where}: {device!r} is unavailable: this torch ({torch.__version__}) {build}; use cpu")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise PolyplanError(f"{where}: {device!r} is unavailable: this machine has {torch.cuda.device_count()} CUDA device(s)")
        return device
    if parsed.type == "mps" and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return device
    raise PolyplanError(f"{where}: {device!r} is not supported here (use cpu, or cuda on a CUDA build of torch)")
