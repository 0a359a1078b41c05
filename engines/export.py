"""`polyplan export` from files: the plan, its profile and its models.yaml, then `planner.engine_rules`."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from polyplan.formats.errors import PolyplanError
from polyplan.planner.engine_rules import EngineExport, check_engine, export_plan
from polyplan.planner.llama_cpp_ranking import ReplayWorkload
from polyplan.formats.plan import read_plan
from polyplan.formats.profile_codec import load
from polyplan.models.candidate_file import plan_candidates
from polyplan.models.builtin import builtin_folder

PathLike = str | os.PathLike[str]


def export_from_files(
    plan_path: PathLike, engine: str, *, profile_path: PathLike | None = None, candidates_path: PathLike | None = None,
    in_process: bool = False, workload: ReplayWorkload | None = None,
) -> EngineExport:
    """Export the plan at `plan_path` to `engine` (see `planner.engine_rules.export_plan`, which
    also says what `in_process` and `workload` do; default workload: each of the profile's
    streams once, whole).

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
    files = engine_files(candidates)
    export = export_plan(plan, profile, candidates, engine, files=files, in_process=in_process,
                         workload=workload or ReplayWorkload())
    if engine != "llama.cpp":
        return export
    return dataclasses.replace(export, server_flags=repack_flags(candidates.target, files))


def repack_flags(target, files: dict[str, str]) -> tuple[str, ...]:
    """`--no-repack` when llama.cpp's extra weight buffers crash on this CPU for any GGUF a
    llama-server would load (`decoder.llama_cpp_buffers`: the verdict polyplan's own members use)."""
    from polyplan.decoder.llama_cpp import llama_cpp_module
    from polyplan.decoder.llama_cpp_buffers import extra_buffers

    try:
        version = llama_cpp_module().__version__
    except PolyplanError:  # no bindings: nothing to probe with, and the flags are only advice
        return ()
    paths = sorted({str(path) for path in (target.source, *files.values()) if path and str(path).endswith(".gguf")})
    return () if all(extra_buffers(path, version).enabled for path in paths) else ("--no-repack",)


def engine_files(candidates) -> dict[str, str]:
    """What an engine loads for each candidate whose weights polyplan keeps elsewhere, by name:
    the shipped family's folders, and the GGUF files polyplan made for llama.cpp copies
    (llama.cpp's quantizer's, or cut to their first blocks; left out while not made)."""
    from polyplan.formats.candidates import EarlyExit, Quantize, base_chain
    from polyplan.models import gguf_prune, llama_quantize

    files = {}
    for candidate in candidates.candidates:
        if candidate.source_kind == "builtin":
            files[candidate.name] = str(builtin_folder(candidate.source.split(":", 1)[1]))
        elif candidate.engine == "llama.cpp" and isinstance(candidate.derive, (Quantize, EarlyExit)):
            chain = base_chain(candidates, candidate.name)
            path = Path(chain[-1].source)
            for derived in reversed(chain[:-1]):  # root first; a copy not made yet ends the walk
                derive = derived.derive
                path = (llama_quantize.copy_path(path, derive.kind) if isinstance(derive, Quantize)
                        else gguf_prune.copy_path(path, derive.layers))
                if not path.is_file():
                    break
            if path.is_file():
                files[candidate.name] = str(path)
    return files
