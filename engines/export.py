"""`polyplan export` from files: the plan, its profile and its models.yaml, then `planner.engines`."""

from __future__ import annotations

import os
from pathlib import Path

from polyplan.formats.errors import PolyplanError
from polyplan.planner.engines import EngineExport, check_engine, export_plan
from polyplan.formats.plan import read_plan
from polyplan.formats.profile_codec import load
from polyplan.models.candidate_file import plan_candidates
from polyplan.models.builtin import builtin_folder, builtin_names

PathLike = str | os.PathLike[str]


def export_from_files(
    plan_path: PathLike, engine: str, *, profile_path: PathLike | None = None, candidates_path: PathLike | None = None,
    in_process: bool = False,
) -> EngineExport:
    """Export the plan at `plan_path` to `engine` (see `planner.engines.export_plan`, which
    also says what `in_process` does).

    The profile is `profile_path`, else the one the plan records; the models are
    `candidates_path`, else the plan's recorded models.yaml, checked against the plan's
    fingerprints (a missing or changed drafter file is an error).

    Raises:
        PolyplanError: unknown engine, unreadable plan or profile, missing or changed model
            files, a target or drafters the engine cannot load.
    """
    check_engine(engine)
    label = str(plan_path)
    plan = read_plan(plan_path)
    candidates = plan_candidates(plan, label, candidates_path)
    if profile_path is None:
        recorded = plan.profile.path
        if recorded is None:
            raise PolyplanError(f"{label}: profile: the plan does not record its profile; pass --profile profile.json")
        profile_path = recorded
        if not Path(profile_path).is_file():
            raise PolyplanError(f"{label}: profile: {profile_path} (recorded in the plan) not found; pass --profile profile.json")
    profile = load(profile_path)
    if profile.target != plan.target:
        raise PolyplanError(f"{profile_path}: target {profile.target!r} is not the plan's target {plan.target!r}")
    folders = {f"builtin:{name}": str(builtin_folder(name)) for name in builtin_names()}
    return export_plan(plan, profile, candidates, engine, builtin_folders=folders, in_process=in_process)
