"""A models.yaml read once: the validated candidates and the record a plan keeps of them
(`read_candidate_file`), and back from a plan to the candidates it names (`plan_candidates`,
refusing models whose files changed since).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polyplan.formats.candidates import CandidateSet, parse_candidates, read_candidates
from polyplan.formats.errors import PolyplanError
from polyplan.formats.plan import PlanFile
from polyplan.models.fingerprints import candidate_fingerprints, with_device


@dataclass(frozen=True)
class CandidateFile:
    """The validated candidates of one models.yaml and the plan's record of them."""

    candidates: CandidateSet
    record: dict[str, Any]  # the plan's `candidates` entry: JSON edge


def read_candidate_file(path: str | os.PathLike[str], device: str | None = None) -> CandidateFile:
    """Parse the models.yaml at `path` (once); `device` overrides every candidate's. PolyplanError
    for no such file, bad YAML or an invalid candidate."""
    candidates = read_candidates(path)
    record = {"path": str(Path(path).resolve()), "yaml": candidates.yaml, "device": device}
    return CandidateFile(with_device(candidates, device), record)


def plan_candidates(
    plan: PlanFile, label: str, candidates_path: str | os.PathLike[str] | None = None, names: Iterable[str] | None = None
) -> CandidateSet:
    """The candidates of `plan` (its recorded models.yaml, or `candidates_path`), the models called
    `names` (default: every model it profiled) checked against the plan's fingerprints; only those
    are fingerprinted. PolyplanError: no models.yaml, a model missing or changed since the plan."""
    record = plan.candidates
    device = None if record is None else record.device
    if candidates_path is not None:
        candidates = read_candidate_file(candidates_path, device).candidates
    elif record is not None and record.path is not None:
        if Path(record.path).is_file():
            candidates = read_candidate_file(record.path, device).candidates
        else:  # the file moved: its recorded contents, relative sources resolved where it was
            moved = parse_candidates(record.yaml, base_dir=Path(record.path).parent, origin=record.path)
            candidates = with_device(moved, device)
    else:
        raise PolyplanError(
            f"{label}: candidates: the plan does not record its models.yaml (made by `recommend --profile` alone); "
            "pass --candidates models.yaml"
        )
    recorded = plan.profiled_fingerprints
    wanted = sorted(recorded) if names is None else list(dict.fromkeys(names))  # a chain: its target first
    known = {candidate.name for candidate in candidates.candidates}
    for name in wanted:
        if name not in known:
            raise PolyplanError(f"{label}: model {name!r} of the plan is not in {candidates.origin}")
    checked = [name for name in wanted if name in recorded]
    now = candidate_fingerprints(candidates, checked)
    check_unchanged(candidates, checked, recorded, now, label=label, since="the plan was made", where="the plan",
                    remedy="re-run polyplan recommend")
    return candidates


def check_unchanged(candidates, names, recorded: dict[str, str], now: dict[str, str], *, label: str, since: str, where: str,
                    remedy: str) -> None:
    """Each of `names` has the fingerprint `recorded` for it (`now`: as the files are). PolyplanError
    naming the first that changed, source files before what is derived from them (a changed GGUF
    is named, not the n-gram drafter or copy made from it), with its file and `remedy`."""
    for name in sorted(names, key=lambda name: candidates.by_name(name).derive is not None):
        fingerprint = recorded[name]
        if now[name] != fingerprint:
            candidate = candidates.by_name(name)
            file = f" (its file {candidate.source})" if candidate.source_kind in ("gguf", "local") and candidate.source else ""
            raise PolyplanError(
                f"{label}: model {name!r} changed since {since}{file} (fingerprint {fingerprint[:19]}… in {where}, "
                f"{now[name][:19]}… now); {remedy}"
            )
