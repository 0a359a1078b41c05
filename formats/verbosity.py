"""Whether other libraries may print on stderr: one setting for the process.

Off by default: where polyplan itself quiets a library (transformers' and huggingface_hub's
progress bars while a model loads, llama.cpp's log, optuna's per-trial lines, transformers'
warnings about arguments its own assisted `generate` passes), it asks `other_output_shown()`
first. `polyplan --verbose` turns it on (`cli/commands/quiet.py`, which also quiets what
polyplan does not call itself: tqdm bars, Python warnings and logs of other modules).

    show_other_output(True)   # e.g. to debug a model that fails to load
"""

from __future__ import annotations

_shown = False


def show_other_output(shown: bool) -> None:
    """Let other libraries print (True) or keep them quiet where polyplan can (False)."""
    global _shown
    _shown = bool(shown)


def other_output_shown() -> bool:
    """Whether other libraries may print their progress bars, logs and warnings."""
    return _shown
