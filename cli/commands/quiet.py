"""Only polyplan's own lines on stderr: other libraries' progress bars, warnings and logs are
off unless `polyplan --verbose` (docs/safety.md, "stderr holds polyplan's lines only").

`quiet_other_libraries` runs once, from the app's callback, before any command imports torch,
transformers, huggingface_hub, tqdm or llama.cpp (`polyplan.cli.app` imports none of them), so
that the switches those libraries read when imported take effect (`QUIET_ENVIRONMENT`: tqdm's
bars, which transformers' GGUF conversion draws bare; huggingface_hub's and transformers' bars
and logs). Python warnings are ignored unless raised in a polyplan module; other libraries'
`logging` records (accelerate, …) reach a handler that drops them; llama.cpp's log, and what
polyplan quiets around its own calls, go through `formats.verbosity`.

Nothing redirects file descriptors: a C library's direct write to stderr (a crash message)
stays visible.
"""

from __future__ import annotations

import logging
import os
import warnings

from polyplan.formats.verbosity import show_other_output

QUIET_ENVIRONMENT = {
    "TQDM_DISABLE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
}
_POLYPLAN_MODULES = r"polyplan(\.|$)"  # a warning's module: where it was raised (after its stacklevel)


def quiet_other_libraries(verbose: bool) -> None:
    """Other libraries' output off for this process (`verbose`: left as they print it)."""
    show_other_output(verbose)
    if verbose:
        return
    os.environ.update(QUIET_ENVIRONMENT)
    warnings.filterwarnings("ignore")
    warnings.filterwarnings("default", module=_POLYPLAN_MODULES)  # inserted before the line above: it wins
    root = logging.getLogger()
    if not any(isinstance(handler, logging.NullHandler) for handler in root.handlers):
        root.addHandler(logging.NullHandler())  # records reach a handler, so logging's last resort prints none
