"""Where polyplan keeps what it computes once and reuses (profiles, dequantized GGUF models, the
quick family, fetched model files): a user folder, never inside the installed package.
"""

from __future__ import annotations

import os
from pathlib import Path

_CACHE_ENV = "POLYPLAN_CACHE_DIR"


def cache_root(override: str | os.PathLike[str] | None = None) -> Path:
    """`override` (`--cache-dir`), else `$POLYPLAN_CACHE_DIR`, else `$XDG_CACHE_HOME/polyplan`, else
    `~/.cache/polyplan`."""
    if override is not None:
        return Path(override).expanduser()
    if os.environ.get(_CACHE_ENV):
        return Path(os.environ[_CACHE_ENV]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "polyplan"
    return Path.home() / ".cache" / "polyplan"
