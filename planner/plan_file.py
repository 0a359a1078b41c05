"""plan.json: what `polyplan recommend` writes and the decoder (or `validate`) reads later.

Format (``plan_version`` 1)::

    {
      "plan_version": 1,
      "target": "vicuna-7b",
      "device": "...",                       # copied from the profile
      "sampling": "greedy",                  # the profile key the plan was made for
      "chain": ["vicuna-7b", "w4", "eagle"], # from the target down (M_1 … M_n)
      "block_sizes": [7, 1],                 # K_1 … K_{n-1}
      "fingerprints": {"vicuna-7b": "...", …},   # of every chain member, from the profile
      "profile": {"path": "profile.json", "schema_version": 1},
      "predicted": {                         # the exact model (planner.cost_model)
        "speedup": 2.32, "cost_per_token_s": 0.0107,
        "forwards_per_token": [...], "time_per_token_s": [...],
        "tokens_per_verification": [...], "drafted_per_verification": [...],
        "wasted_per_verification": [...], "acceptances": [...]
      },
      "paper": {                             # Lemma 3.1 (planner.paper_model)
        "speedup": 4.54, "time_per_token_s": ..., "phi_per_token": [...],
        "mean_lengths": [...], "length_sources": ["decoded", "eq3"], "alpha_scale": 1
      },
      "alternatives": [{"chain": [...], "block_sizes": [...], "exact_speedup": ..., "paper_speedup": ...}],
      "insertions": ["in: w4: ...", ...],
      "search": {"max_levels": 4, "k_max": 8, "method": "grid"}
    }

`write_plan` writes atomically; `read_plan` validates the fields a consumer needs and raises
`PolyplanError` naming the file and the field.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polyplan.errors import PolyplanError
from polyplan.planner.search import ChainPlan, Recommendation

PLAN_VERSION = 1


@dataclass(frozen=True)
class PlanFile:
    """The fields of plan.json a consumer needs to run and check the chain."""

    target: str
    sampling: str
    chain: tuple[str, ...]
    block_sizes: tuple[int, ...]
    fingerprints: tuple[tuple[str, str], ...]
    predicted_speedup: float
    paper_speedup: float
    payload: dict[str, Any]  # the whole JSON object, for anything else


def _summary(plan: ChainPlan) -> dict[str, Any]:
    return {
        "chain": list(plan.chain),
        "block_sizes": list(plan.block_sizes),
        "exact_speedup": plan.exact_speedup,
        "paper_speedup": plan.paper_speedup,
    }


def plan_to_json_dict(result: Recommendation, *, profile_path: str | None = None) -> dict[str, Any]:
    """The plan.json object for a recommendation."""
    best = result.best
    prints = dict(result.fingerprints)
    exact = best.exact
    paper = best.paper
    return {
        "plan_version": PLAN_VERSION,
        "target": result.target,
        "device": result.device,
        "sampling": result.sampling,
        "chain": list(best.chain),
        "block_sizes": list(best.block_sizes),
        "fingerprints": {name: prints[name] for name in best.chain},
        "profile": {"path": profile_path, "schema_version": 1},
        "predicted": {
            "speedup": exact.speedup,
            "cost_per_token_s": exact.cost_per_token,
            "forwards_per_token": list(exact.forwards_per_token),
            "time_per_token_s": list(exact.time_per_token),
            "tokens_per_verification": list(exact.tokens_per_verification),
            "drafted_per_verification": list(exact.drafted_per_verification),
            "wasted_per_verification": list(exact.wasted_per_verification),
            "acceptances": list(best.acceptances),
        },
        "paper": {
            "speedup": paper.speedup,
            "time_per_token_s": paper.time_per_token,
            "phi_per_token": list(paper.phi_per_token),
            "mean_lengths": list(paper.mean_lengths),
            "length_sources": list(paper.length_sources),
            "alpha_scale": paper.alpha_scale,
        },
        "alternatives": [_summary(plan) for plan in result.ranked],
        "insertions": [note.line for note in result.insertions],
        "search": {"max_levels": result.max_levels, "k_max": result.k_max, "method": best.search},
    }


def write_plan(result: Recommendation, path: str | os.PathLike[str], *, profile_path: str | None = None) -> None:
    """Write plan.json atomically (temporary file in the same folder, then os.replace)."""
    path = Path(path)
    text = json.dumps(plan_to_json_dict(result, profile_path=profile_path), indent=2, allow_nan=False) + "\n"
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise PolyplanError(f"{path}: folder {directory} does not exist")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def read_plan(path: str | os.PathLike[str]) -> PlanFile:
    """Read and check plan.json; `PolyplanError` naming the file and field on any problem."""
    label = str(path)
    try:
        payload = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PolyplanError(f"{label}: no such file") from None
    except json.JSONDecodeError as error:
        raise PolyplanError(f"{label}: not valid JSON (line {error.lineno}: {error.msg})") from None

    def fail(field: str, problem: str) -> None:
        raise PolyplanError(f"{label}: {field}: {problem}")

    if not isinstance(payload, dict):
        fail("plan", "must be a JSON object")
    if payload.get("plan_version") != PLAN_VERSION:
        fail("plan_version", f"unsupported version {payload.get('plan_version')!r}; this polyplan reads {PLAN_VERSION}")
    for key in ("target", "sampling"):
        if not isinstance(payload.get(key), str) or not payload[key]:
            fail(key, "must be a non-empty string")
    chain = payload.get("chain")
    if not isinstance(chain, list) or not chain or not all(isinstance(name, str) and name for name in chain):
        fail("chain", "must be a non-empty list of model names")
    if chain[0] != payload["target"]:
        fail("chain", f"must start with the target {payload['target']!r}")
    blocks = payload.get("block_sizes")
    if not isinstance(blocks, list) or len(blocks) != len(chain) - 1:
        fail("block_sizes", f"must list {len(chain) - 1} block sizes (one per verifying level)")
    for index, k in enumerate(blocks):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            fail(f"block_sizes[{index}]", f"must be an integer >= 1, got {k!r}")
    prints = payload.get("fingerprints")
    if not isinstance(prints, dict) or any(name not in prints for name in chain):
        fail("fingerprints", "must give a fingerprint for every chain member")
    speeds = []
    for section in ("predicted", "paper"):
        value = (payload.get(section) or {}).get("speedup")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            fail(f"{section}.speedup", f"must be a finite number > 0, got {value!r}")
        speeds.append(float(value))
    return PlanFile(
        target=payload["target"],
        sampling=payload["sampling"],
        chain=tuple(chain),
        block_sizes=tuple(blocks),
        fingerprints=tuple((name, str(prints[name])) for name in chain),
        predicted_speedup=speeds[0],
        paper_speedup=speeds[1],
        payload=payload,
    )
