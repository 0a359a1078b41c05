"""Where a validation report may go, checked before anything is profiled or decoded: a folder
that may not exist yet or hold an earlier polyplan report (replaced), but never an unrelated file
under a name the report writes (`polyplan.formats.outputs.check_report_folder`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from polyplan.formats.outputs import check_report_folder, is_json_with
from polyplan.validation.plots import PLOT_FILES
from polyplan.validation.reporting import JSON_FILE as REPORT_JSON
from polyplan.validation.reporting import REPORT_FILE as REPORT_MD

PLOTS = tuple(PLOT_FILES.values())


def _is_validation_report(path: Path) -> bool:
    """Whether `path` is a polyplan validation's report.json (what `--out` may replace): told by its
    keys, not decoded, so that an older or damaged report is still ours to replace."""
    return is_json_with(path, ("chains", "headline", "settings"))


def is_plan(path: Path) -> bool:
    """Whether `path` is a plan.json polyplan wrote."""
    return is_json_with(path, ("plan_version", "alternatives"))


def check_validation_folder(
    out: str | os.PathLike[str],
    inputs: Iterable[tuple[str, str | os.PathLike[str] | None]] = (),
    own_files: Mapping[str, Callable[[Path], bool]] | None = None,
) -> Path:
    """`out` as a folder where a validation report may go."""
    return check_report_folder(
        out, "--out", owner=REPORT_JSON, is_ours=_is_validation_report, files=[REPORT_MD, *PLOTS],
        own_files=own_files, inputs=inputs,
    )
