"""Only polyplan's own lines on stderr: other libraries' progress bars, warnings and logs are
off unless `polyplan --verbose`.

`quiet_other_libraries` runs once, from the app's callback, before any command imports torch,
transformers, huggingface_hub, tqdm or llama.cpp (`polyplan.cli.app` imports none of them), so
the environment variables those libraries read when they are imported take effect:

- tqdm (`TQDM_DISABLE`): transformers' "Converting and de-quantizing GGUF tensors" bar is a bare
  tqdm; huggingface_hub's and transformers' bars ("Loading weights", "Writing model shards")
  start from `HF_HUB_DISABLE_PROGRESS_BARS`;
- transformers' and huggingface_hub's logs at error level (`TRANSFORMERS_VERBOSITY`,
  `HF_HUB_VERBOSITY`, and no advisory warnings);
- Python warnings: ignored unless raised in a polyplan module;
- Python logging of other libraries (accelerate, …): a root handler that drops their records
  (polyplan itself does not log through `logging`);
- llama.cpp's log, and the bars and logs polyplan quiets itself around its own calls: through
  `formats.verbosity` (llama.cpp's C log goes to a no-op callback).

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
POLYPLAN_MODULES = r"polyplan(\.|$)"  # a warning's module: where it was raised (after its stacklevel)


def quiet_other_libraries(verbose: bool) -> None:
    """Other libraries' output off for this process (`verbose`: left as they print it)."""
    show_other_output(verbose)
    if verbose:
        return
    os.environ.update(QUIET_ENVIRONMENT)
    warnings.filterwarnings("ignore")
    warnings.filterwarnings("default", module=POLYPLAN_MODULES)  # inserted before the line above: it wins
    root = logging.getLogger()
    if not any(isinstance(handler, logging.NullHandler) for handler in root.handlers):
        root.addHandler(logging.NullHandler())  # records reach a handler, so logging's last resort prints none
