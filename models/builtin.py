"""Where the shipped family lives and what its training run measured."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from polyplan.formats.errors import PolyplanError

FAMILY_FILE = "family.json"


def weights_root() -> Path:
    """The folder of the shipped family: package data of `polyplan` (`polyplan/data/family`,
    written by the family's training code in `polyplan.zoo`; read here as data, not imported)."""
    return Path(str(resources.files("polyplan") / "data" / "family"))


def builtin_names(root: Path | None = None) -> tuple[str, ...]:
    """Names usable as `builtin:<name>` (the model folders of the shipped family)."""
    root = weights_root() if root is None else root
    if not root.is_dir():
        return ()
    return tuple(sorted(p.name for p in root.iterdir() if (p / "config.json").is_file()))


def builtin_folder(name: str, root: Path | None = None) -> Path:
    """The HF folder of `builtin:<name>`."""
    root = weights_root() if root is None else root
    folder = root / name
    if not (folder / "config.json").is_file():
        available = ", ".join(builtin_names(root)) or "none shipped; run `polyplan zoo train`"
        raise PolyplanError(f"builtin:{name}: no such builtin model (available: {available})")
    return folder


def cached_validation_loss(folder: Path, variant: str) -> float | None:
    """The held-out loss of `variant` ('target', 'target-int8', …) measured at training time, from
    the `family.json` beside model folder `folder` (None when there is none)."""
    path = folder.parent / FAMILY_FILE
    if not path.is_file():
        return None
    try:
        family = json.loads(path.read_text())
    except json.JSONDecodeError:
        raise PolyplanError(f"{path}: not valid JSON") from None
    value = family.get("report", {}).get("validation_loss", {}).get(variant)
    return float(value) if value is not None else None
