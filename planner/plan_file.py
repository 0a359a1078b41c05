"""plan.json: what `polyplan recommend` writes and the decoder (or `validate`) reads later.

Format (``plan_version`` 1)::

    {
      "plan_version": 1,
      "target": "vicuna-7b",
      "device": "...",                       # copied from the profile
      "sampling": "greedy",                  # the profile key the plan was made for
      "chain": ["vicuna-7b", "w4", "eagle"], # from the target down (M_1 … M_n)
      "block_sizes": [7, 1],                 # K_1 … K_{n-1}
      "verify_widths": [[[2, 4], [3, 4]], []],  # per verifying level, [k, width]: a pass over k
                                             # tokens runs padded to width (planner.verify_width);
                                             # absent in older plans (never pad)
      "fingerprints": {"vicuna-7b": "...", …},   # of every profiled model, from the profile
      "profile": {"path": "profile.json", "schema_version": 1,
                  "digest": "sha256:..."},  # optional: of the profile planned on (plan_check)
      "candidates": {"path": "/abs/models.yaml", "yaml": {...}},   # optional: how to load the
                                             # models again (the file and its parsed contents)
      "loop_overhead": {"per_step_s": ..., "per_round_s": ...},    # or null: see planner.overhead
      "switch_costs": {"eagle": [0.0002, 0.00005], …},  # per model: extra seconds of the 1st, 2nd, …
                                             # pass after a switch (planner.overhead); {} when none
      "predicted": {                         # the exact model (planner.cost_model)
        "speedup": 2.32, "cost_per_token_s": 0.0107,
        "forwards_per_token": [...], "time_per_token_s": [...],
        "tokens_per_verification": [...], "drafted_per_verification": [...],
        "wasted_per_verification": [...], "acceptances": [...], "overhead_per_token_s": ...,
        "interval": [2.18, 2.41]             # optional: bootstrap interval of "speedup"
      },                                     # (planner.prediction_interval)
      "paper": {                             # Lemma 3.1 (planner.paper_model)
        "speedup": 4.54, "time_per_token_s": ..., "phi_per_token": [...],
        "mean_lengths": [...], "length_sources": ["decoded", "eq3"], "alpha_scale": 1
      },
      "alternatives": [                      # every ranked chain, best first (the plan's is first)
        {"chain": [...], "block_sizes": [...], "exact_speedup": ..., "paper_speedup": ...,
         "acceptances": [...], "exact": {<as "predicted">}, "paper": {<as "paper">},
         "theorem_3_2": [{"model": "w4", "verdict": "helps"}],   # per intermediate model
         "verify_widths": [...]}             # as above, for this chain
      ],
      "insertions": ["in: w4: ...", ...],
      "prediction_intervals": {              # optional (absent in older plans)
        "level": 0.95, "resamples": 200, "seed": 0,
        "latency_source": "samples", "acceptance_source": "runs",
        "tied_with_best": [["vicuna-7b", "eagle"]],   # chains whose interval overlaps the best's
        "ranking": "ranking: cannot tell ... apart from: ..."
      },
      "warnings": ["..."],                   # optional: why the timings are doubtful
                                             # (planner.timing_health); [] when none
      "search": {"max_levels": 4, "k_max": 8, "method": "grid", "context_length": null,
                 "acceptance_model": "iid"}   # or "runs": see planner.runs
    }

`write_plan` writes atomically; `read_plan` validates the fields a consumer needs and raises
`PolyplanError` naming the file and the field; `planned_chains` reads the ranked chains with
their predictions (for `polyplan validate`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polyplan.formats.atomic import write_text_atomically
from polyplan.formats.errors import PolyplanError
from polyplan.formats.inputs import is_finite_number, read_json_file
from polyplan.formats.overhead import LoopOverhead, overhead_from_json
from polyplan.planner.overhead import profile_overhead
from polyplan.planner.prediction_interval import DEFAULT_RESAMPLES, PredictionIntervals, prediction_intervals
from polyplan.planner.search import ChainPlan, Recommendation, recommend
from polyplan.planner.timing_health import timing_warnings
from polyplan.formats.plan import VerifyWidths, verify_widths_from_json
from polyplan.formats.profile import Profile

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


def _exact_json(plan: ChainPlan, intervals: PredictionIntervals | None = None) -> dict[str, Any]:
    exact = plan.exact
    found = None if intervals is None else intervals.of(plan.chain)
    interval = None if found is None else {"interval": [found.speedup.low, found.speedup.high]}
    return {
        "speedup": exact.speedup,
        "cost_per_token_s": exact.cost_per_token,
        "forwards_per_token": list(exact.forwards_per_token),
        "time_per_token_s": list(exact.time_per_token),
        "tokens_per_verification": list(exact.tokens_per_verification),
        "drafted_per_verification": list(exact.drafted_per_verification),
        "wasted_per_verification": list(exact.wasted_per_verification),
        "acceptances": list(plan.acceptances),
        "overhead_per_token_s": exact.overhead_per_token,
        **(interval or {}),
    }


def _paper_json(plan: ChainPlan) -> dict[str, Any]:
    paper = plan.paper
    return {
        "speedup": paper.speedup,
        "time_per_token_s": paper.time_per_token,
        "phi_per_token": list(paper.phi_per_token),
        "mean_lengths": list(paper.mean_lengths),
        "length_sources": list(paper.length_sources),
        "alpha_scale": paper.alpha_scale,
    }


def _summary(plan: ChainPlan, intervals: PredictionIntervals | None) -> dict[str, Any]:
    return {
        "chain": list(plan.chain),
        "block_sizes": list(plan.block_sizes),
        "exact_speedup": plan.exact_speedup,
        "paper_speedup": plan.paper_speedup,
        "acceptances": list(plan.acceptances),
        "exact": _exact_json(plan, intervals),
        "paper": _paper_json(plan),
        "theorem_3_2": [{"model": model, "verdict": verdict} for model, verdict in plan.insertion_verdicts],
        "verify_widths": [widths.to_json() for widths in plan.verify_widths],
    }


def profile_digest(profile: Profile) -> str:
    """A digest of everything a profile holds (its canonical JSON), recorded in the plan so
    that `planner.plan_check` can tell an edited plan from a profile measured again since."""
    import hashlib

    text = json.dumps(profile.to_json_dict(), sort_keys=True, allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def plan_to_json_dict(
    result: Recommendation,
    *,
    profile_path: str | None = None,
    candidates: dict[str, Any] | None = None,
    profile_digest: str | None = None,
) -> dict[str, Any]:
    """The plan.json object for a recommendation.

    `candidates` ({"path": ..., "yaml": ...}) records the models.yaml the profile was made
    from, so that `polyplan validate` can load the same models later.
    """
    best = result.best
    prints = dict(result.fingerprints)
    return {
        "plan_version": PLAN_VERSION,
        "target": result.target,
        "device": result.device,
        "sampling": result.sampling,
        "chain": list(best.chain),
        "block_sizes": list(best.block_sizes),
        "verify_widths": [widths.to_json() for widths in best.verify_widths],
        "fingerprints": dict(prints),
        "profile": {"path": profile_path, "schema_version": 1, **({"digest": profile_digest} if profile_digest else {})},
        "candidates": candidates,
        "loop_overhead": None if result.overhead is None else result.overhead.to_json_dict(),
        "switch_costs": {name: list(cost) for name, cost in result.switch_costs},
        "predicted": _exact_json(best, result.intervals),
        "paper": _paper_json(best),
        "alternatives": [_summary(plan, result.intervals) for plan in result.ranked],
        "insertions": [note.line for note in result.insertions],
        "prediction_intervals": None if result.intervals is None else _intervals_json(result.intervals),
        "warnings": list(result.warnings),
        "search": {
            "max_levels": result.max_levels, "k_max": result.k_max, "method": best.search,
            "context_length": result.context_length, "acceptance_model": result.acceptance_model,
        },
    }


def _intervals_json(intervals: PredictionIntervals) -> dict[str, Any]:
    return {
        "level": intervals.level,
        "resamples": intervals.resamples,
        "seed": intervals.seed,
        "latency_source": intervals.latency_source,
        "acceptance_source": intervals.acceptance_source,
        "tied_with_best": [list(item.chain) for item in intervals.tied_with_best()],
        "ranking": intervals.ranking_line(),
    }


def write_plan(
    result: Recommendation,
    path: str | os.PathLike[str],
    *,
    profile_path: str | None = None,
    candidates: dict[str, Any] | None = None,
    profile_digest: str | None = None,
) -> None:
    """Write plan.json atomically (temporary file in the same folder, then os.replace)."""
    path = Path(path)
    payload = plan_to_json_dict(result, profile_path=profile_path, candidates=candidates, profile_digest=profile_digest)
    write_text_atomically(path, json.dumps(payload, indent=2, allow_nan=False) + "\n")


def plan_from_profile(
    profile: Profile,
    out: str | os.PathLike[str] | None,
    *,
    profile_path: str | None,
    candidates: dict[str, Any] | None = None,
    sampling: str = "greedy",
    resamples: int = DEFAULT_RESAMPLES,
    drafters: tuple[str, ...] | None = None,
    **search_options: Any,
) -> Recommendation:
    """`recommend` with the loop overhead the profile records (if any), the bootstrap
    intervals of every ranked chain's exact speedup (`resamples` replicates; 0: none) and the
    profile's timing warnings, written to `out`.

    `drafters`: the models a chain may use besides the target (default: every profiled one; a
    profile keeps entries of models outside the current candidates, which cannot be run).
    `search_options` go to `planner.search.recommend` (max_levels, k_max, block_sizes, seed, …).
    """
    overhead = profile_overhead(profile, sampling)
    result = recommend(profile, sampling=sampling, overhead=overhead, candidates=drafters, **search_options)
    intervals = None
    if resamples:
        intervals = prediction_intervals(
            profile, [(plan.chain, plan.block_sizes, plan.exact_speedup) for plan in result.ranked], sampling=sampling,
            context_length=result.context_length, overhead=overhead, acceptance_model=result.acceptance_model,
            resamples=resamples, seed=int(search_options.get("seed", 0)),
        )
    result = dataclasses.replace(result, intervals=intervals, warnings=timing_warnings(profile))
    if out is not None:
        write_plan(result, out, profile_path=profile_path, candidates=candidates, profile_digest=profile_digest(profile))
    return result


def read_plan(path: str | os.PathLike[str]) -> PlanFile:
    """Read and check plan.json; `PolyplanError` naming the file and field on any problem."""
    label = str(path)
    payload = read_json_file(path, "file")

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
        value = payload[section].get("speedup") if isinstance(payload.get(section), dict) else None
        if not is_finite_number(value) or value <= 0:
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


@dataclass(frozen=True)
class PlannedChain:
    """One ranked chain of a plan with what both models predicted for it (models M_1 first)."""

    chain: tuple[str, ...]
    block_sizes: tuple[int, ...]
    exact_speedup: float
    paper_speedup: float
    acceptances: tuple[float, ...]  # α_{i,i+1} per level
    forwards_per_token: tuple[float, ...]  # exact model, per model
    tokens_per_verification: tuple[float, ...]  # exact model, per verifying level
    drafted_per_verification: tuple[float, ...]  # exact model: E[m], tokens handed up per verification
    time_per_token_s: tuple[float, ...]  # exact model: seconds in each model's forwards per token
    paper_phi_per_token: tuple[float, ...]  # Lemma 3.1's φ_i / N, per model
    paper_mean_lengths: tuple[float, ...]  # Lemma 3.1's E[L_i], per verifying level
    overhead_per_token_s: float  # the loop overhead the exact model included (0 when none)
    exact_interval: tuple[float, float] | None = None  # bootstrap interval of exact_speedup (None: older plan)
    # per verifying level, the padded widths the exact model assumed (planner.verify_width);
    # () in a plan from before they were recorded: the decoder then never pads
    verify_widths: tuple[VerifyWidths, ...] = ()

    def label(self) -> str:
        return " > ".join(self.chain)


def _numbers(value: Any, length: int, where: str) -> tuple[float, ...]:
    if not isinstance(value, list) or len(value) != length:
        raise PolyplanError(f"{where}: must list {length} numbers")
    for item in value:
        if not is_finite_number(item):
            raise PolyplanError(f"{where}: must hold finite numbers, got {item!r}")
    return tuple(float(item) for item in value)


def planned_chains(plan: PlanFile, label: str = "plan.json") -> tuple[PlannedChain, ...]:
    """The plan's ranked chains (best first) with both models' predictions.

    Raises:
        PolyplanError: naming `label` and the field, e.g. for a plan written before the
            alternatives carried their predictions.
    """
    entries = plan.payload.get("alternatives")
    if not isinstance(entries, list) or not entries:
        raise PolyplanError(f"{label}: alternatives: must be a non-empty list of ranked chains")
    chains = []
    for index, entry in enumerate(entries):
        where = f"{label}: alternatives[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("exact"), dict) or not isinstance(entry.get("paper"), dict):
            raise PolyplanError(f"{where}: no predictions recorded (a plan from an older polyplan?); re-run polyplan recommend")
        chain = entry.get("chain")
        if not isinstance(chain, list) or not chain or not all(isinstance(name, str) for name in chain) or chain[0] != plan.target:
            raise PolyplanError(f"{where}.chain: must be a list of model names starting with the target {plan.target!r}")
        blocks = entry.get("block_sizes")
        if not isinstance(blocks, list) or len(blocks) != len(chain) - 1 or not all(
            isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in blocks
        ):
            raise PolyplanError(f"{where}.block_sizes: must list {len(chain) - 1} integers >= 1")
        exact, paper = entry["exact"], entry["paper"]
        levels = len(chain) - 1
        speeds = _numbers([exact.get("speedup"), paper.get("speedup")], 2, f"{where}: speedups")
        chains.append(
            PlannedChain(
                chain=tuple(chain),
                block_sizes=tuple(blocks),
                exact_speedup=speeds[0],
                paper_speedup=speeds[1],
                acceptances=_numbers(exact.get("acceptances"), levels, f"{where}.exact.acceptances"),
                forwards_per_token=_numbers(exact.get("forwards_per_token"), len(chain), f"{where}.exact.forwards_per_token"),
                tokens_per_verification=_numbers(
                    exact.get("tokens_per_verification"), levels, f"{where}.exact.tokens_per_verification"
                ),
                drafted_per_verification=_numbers(
                    exact.get("drafted_per_verification"), levels, f"{where}.exact.drafted_per_verification"
                ),
                time_per_token_s=_numbers(exact.get("time_per_token_s"), len(chain), f"{where}.exact.time_per_token_s"),
                paper_phi_per_token=_numbers(paper.get("phi_per_token"), len(chain), f"{where}.paper.phi_per_token"),
                paper_mean_lengths=_numbers(paper.get("mean_lengths"), levels, f"{where}.paper.mean_lengths"),
                overhead_per_token_s=_numbers([exact.get("overhead_per_token_s", 0.0)], 1, f"{where}.exact.overhead_per_token_s")[0],
                exact_interval=None if exact.get("interval") is None
                else _interval(_numbers(exact["interval"], 2, f"{where}.exact.interval"), f"{where}.exact.interval"),
                verify_widths=_verify_widths(entry.get("verify_widths"), levels, f"{where}.verify_widths"),
            )
        )
    return tuple(chains)


def _verify_widths(value: Any, levels: int, where: str) -> tuple[VerifyWidths, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) != levels:
        raise PolyplanError(f"{where}: must list {levels} width maps (one per verifying level)")
    return tuple(verify_widths_from_json(item, f"{where}[{index}]") for index, item in enumerate(value))


def _interval(values: tuple[float, ...], where: str) -> tuple[float, float]:
    low, high = values
    if low > high:
        raise PolyplanError(f"{where}: low {low:g} is above high {high:g}")
    return low, high


def plan_overhead(plan: PlanFile, label: str = "plan.json") -> LoopOverhead | None:
    """The loop overhead the plan's exact predictions included (None when none)."""
    value = plan.payload.get("loop_overhead")
    return None if value is None else overhead_from_json(value, f"{label}: loop_overhead")
