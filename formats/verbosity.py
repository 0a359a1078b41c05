"""Whether other libraries (progress bars, llama.cpp's log, optuna, transformers' warnings) may print
on stderr: one setting for the process, off by default, on with `polyplan --verbose`."""

from __future__ import annotations

_shown = False


def show_other_output(shown: bool) -> None:
    """Let other libraries print (True) or keep them quiet where polyplan can (False)."""
    global _shown
    _shown = bool(shown)


def other_output_shown() -> bool:
    """Whether other libraries may print their progress bars, logs and warnings."""
    return _shown
