"""transformers' and huggingface_hub's progress bars off while polyplan loads or converts a model
(one "Loading weights" bar per model would drown the CLI's own lines), then as they were; left
on when other libraries' output is shown (`formats.verbosity`, `polyplan --verbose`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from polyplan.formats.verbosity import other_output_shown


@contextmanager
def hf_progress_bars_off() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    turned_off = hf_logging.is_progress_bar_enabled() and not other_output_shown()
    if turned_off:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if turned_off:
            hf_logging.enable_progress_bar()
