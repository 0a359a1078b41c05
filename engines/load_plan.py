"""A plan per load: for each number of concurrent requests asked (`--concurrency`), the
configuration the cost model under load predicts (`planner.llama_cpp.under_load`), what to type,
and the report's lines and JSON.

llama-server: the best configuration at each count with its interval, the physical limit there
and the target alone's aggregate tokens/s; "off from N requests" where speculation stops paying;
one command where one configuration is chosen (or tied) over the whole range, else the ranges and
a command for each, every command with `-np` for the most requests it serves and `-c` for that
many slots of `SLOT_CONTEXT` tokens. vLLM: the export's drafter at each count, written as vLLM's
per-batch-size schedule (`VLLM_SCHEDULE_KEY`, from `VLLM_VERSION` on), its K where the drafter
pays and 0 where it does not. polyplan does not model vLLM's own costs under load: that schedule
is predicted from the profile's T(k) with polyplan's loop, and the report says so.
docs/engines.md, "A plan per load".
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from polyplan.formats.errors import PolyplanError
from polyplan.formats.options import MAX_BLOCK_SIZE
from polyplan.planner.engine_export import EngineExport
from polyplan.planner.llama_cpp.kv_placement import DEFAULT_SLOT_CONTEXT
from polyplan.planner.llama_cpp.ranking import LEVEL, llama_cpp_spec_flags
from polyplan.planner.llama_cpp.under_load import (LoadedConfig, LoadRange, LoadRanking, check_widths, load_ranges, needed_width, same_server,
                                                   off_from, rank_under_load, ranked_block_size)

SLOT_CONTEXT = DEFAULT_SLOT_CONTEXT  # tokens of context per llama-server slot (`-c` is shared by the `-np` slots)
VLLM_VERSION = "0.24.0"  # the first vLLM release whose speculative_config takes `VLLM_SCHEDULE_KEY` (docs/engines.md)
VLLM_SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"  # [[first, last, K], ...], batch sizes first..last inclusive


@dataclass(frozen=True)
class VllmStep:
    """The export's vLLM drafter at one batch size: its row under load (None: not ranked) and
    the K written for it (0: off)."""

    clients: int
    row: LoadedConfig | None
    block_size: int


@dataclass(frozen=True)
class LoadPlan:
    """The rankings at every count asked, the ranges of one choice, where speculation stops
    paying, and for vLLM the drafter's steps (empty otherwise)."""

    engine: str
    clients: tuple[int, ...]
    rankings: tuple[LoadRanking, ...]
    ranges: tuple[LoadRange, ...]
    off_from: int | None
    vllm: tuple[VllmStep, ...] = ()


PROFILE_KS = (1, 2, 3, 4, 6, 8, 12, 16)  # `polyplan profile --latency-ks`'s default widths
ONE_AT_A_TIME = "--concurrency: HF generate serves one request at a time; use --engine llama.cpp or vllm"


def models_yaml(plan_path, candidates_path=None) -> str:
    """The models.yaml a plan was made from (`candidates_path` where given), for the command that
    re-times its profile; "models.yaml" where the plan does not record one."""
    from polyplan.formats.plan import read_plan

    if candidates_path is not None:
        return str(candidates_path)
    record = read_plan(plan_path).candidates
    return "models.yaml" if record is None or record.path is None else str(record.path)


def profile_command(candidates_file: str, needed: int) -> str:
    """`polyplan profile` timing the target's T(k) to width `needed`: its default widths, then
    steps of a half and a third (24, 32, 48, 64, ...) up to `needed`; what to do instead where
    `needed` is wider than `--latency-ks` takes."""
    widths, power = [k for k in PROFILE_KS if k < needed], PROFILE_KS[-1]
    while power < needed:
        widths += [width for width in (power * 3 // 2, power * 2) if width < needed]
        power *= 2
    widths.append(needed)
    command = f"polyplan profile --candidates {shlex.quote(candidates_file)} --latency-ks {','.join(map(str, sorted(set(widths))))}"
    if needed > MAX_BLOCK_SIZE:
        command += (f" (--latency-ks takes widths up to {MAX_BLOCK_SIZE}: ask for fewer concurrent requests or a smaller "
                    "--k-max, or price with llama.cpp's own numbers)")
    return command


def plan_under_load(export: EngineExport, clients: Sequence[int], candidates_file: str = "models.yaml") -> LoadPlan:
    """`export` ranked at each of `clients` concurrent requests; `candidates_file`: the
    models.yaml the refusal's command names.

    Raises:
        PolyplanError: the engine serves one request at a time (hf), the export has nothing to
            rank (no drafter the engine can run, for vLLM), or its T(k) lacks the widths the
            counts need (`check_widths`: one line naming the command that measures them).
    """
    clients = tuple(clients)
    request = export.server_request
    if export.engine == "hf" or request is None:
        raise PolyplanError(ONE_AT_A_TIME)
    if export.engine == "llama.cpp":
        k = ranked_block_size(export.options, request)
        check_widths(request, clients, k, profile_command(candidates_file, needed_width(request, clients, k)))
        rankings = rank_under_load(export.options, request, clients)
        return LoadPlan("llama.cpp", clients, rankings, load_ranges(rankings), off_from(rankings))
    option = export.chosen
    if option is None:
        raise PolyplanError(f"--concurrency: no drafter of the plan runs on vLLM ({export.unexported}); nothing to schedule")
    check_widths(request, clients, option.block_size,
                 profile_command(candidates_file, needed_width(request, clients, option.block_size)))
    rankings = rank_under_load([option], request, clients, unified=False)  # vLLM has no per-slot KV split
    flags = tuple(llama_cpp_spec_flags(option.method, option.block_size, option.source, option.ngram_sizes))
    steps = []
    for ranking in rankings:
        row = next((config for config in ranking.configs if tuple(config.flags) == flags), None)
        steps.append(VllmStep(ranking.clients, row, option.block_size if row is not None and row.low > 1.0 else 0))
    return LoadPlan("vllm", clients, rankings, (), _off_from_steps(steps), tuple(steps))


def _off_from_steps(steps: Sequence[VllmStep]) -> int | None:
    """The least count from which the drafter is off at every larger count asked."""
    found = None
    for step in reversed(steps):
        if step.block_size != 0:
            break
        found = step.clients
    return found


# --------------------------------------------------------------------------- llama-server


def server_args(export: EngineExport, flags: Sequence[str], slots: int) -> list[str]:
    """llama-server's arguments for `flags` (none: the plain server) serving `slots` requests at
    once: the export's own (`engines.export.engine_config`) with `-np` and `-c` for that many
    slots of `SLOT_CONTEXT`."""
    temperature = f"{export.temperature:g}" if export.temperature > 0 else "0"
    return ["-m", export.target_source, *flags, "--temp", temperature, *export.server_flags,
            "-np", str(slots), "-c", str(slots * SLOT_CONTEXT)]


def server_command(export: EngineExport, flags: Sequence[str], slots: int) -> str:
    return "llama-server " + " ".join(shlex.quote(part) for part in server_args(export, flags, slots))


def _requests(first: int, last: int) -> str:
    if first == last:
        return f"{first} request" + ("" if first == 1 else "s")
    return f"{first}-{last} requests"


def _bounds(interval: tuple[float, float] | None) -> str:
    return "" if interval is None else f"[{interval[0]:.2f}, {interval[1]:.2f}]"


def _speed(tokens_per_s: float) -> str:
    return f"{tokens_per_s:.1f} tok/s"


def _table(rankings: Sequence[LoadRanking], rows: Sequence[tuple[str, LoadedConfig | None]]) -> list[str]:
    """One line per count: the row shown, its speedup and workload interval, the limit there and
    the target alone's and the row's aggregate tokens/s."""
    lines = [f"  {'requests':>8}  {'configuration':<40} {'speedup':>8} {'workload':>14} {'limit':>7} {'target alone':>13} "
             f"{'aggregate':>12} {'per request':>12}"]
    for ranking, (label, row) in zip(rankings, rows):
        if row is None:
            lines.append(f"  {ranking.clients:>8}  {label[:40]:<40} {'-':>8} {'':>14} {ranking.limit:>6.2f}x "
                         f"{_speed(ranking.target_tokens_per_s):>13} {'-':>12} {'-':>12}")
            continue
        interval = row.workload_interval or row.interval
        lines.append(f"  {ranking.clients:>8}  {label[:40]:<40} {row.speedup:>7.2f}x {_bounds(interval):>14} {ranking.limit:>6.2f}x "
                     f"{_speed(ranking.target_tokens_per_s):>13} {_speed(row.tokens_per_s):>12} "
                     f"{_speed(row.request_tokens_per_s):>12}")
    return lines


def _off_line(plan: LoadPlan, what: str) -> list[str]:
    if plan.off_from is None:
        return []
    if plan.off_from == plan.clients[0]:
        return [f"off from {_requests(plan.off_from, plan.off_from)}: {what} pays at none of the counts asked"]
    return [f"off from {_requests(plan.off_from, plan.off_from)}: {what} stops paying there (and at every larger count asked)"]


def load_lines(export: EngineExport, plan: LoadPlan) -> list[str]:
    """The report's section under load, after the single-request export's lines."""
    counts = ", ".join(str(count) for count in plan.clients)
    if plan.engine == "vllm":
        return _vllm_lines(export, plan, counts)
    lines = ["", f"under load: llama-server with N requests in flight (-np N), N = {counts}; predicted aggregate decode "
                 f"speedup over the target alone at the same N [{LEVEL:.0%} interval for the workload's mean], the physical "
                 "limit at N (a free drafter that is always right) and the target alone's aggregate decode tokens/s:"]
    lines += _table(plan.rankings, [(ranking.chosen.label, ranking.chosen) for ranking in plan.rankings])
    lines += _off_line(plan, "speculation")
    if len(plan.ranges) == 1:
        only = plan.ranges[0]
        tied = any(not same_server(only.config.label, ranking.chosen) for ranking in plan.rankings)
        lines += ["", f"one configuration for {_requests(only.first, only.last)}: {only.config.label}"
                      + (" (tied within its interval where another is chosen)" if tied else ""),
                  "what to type under load:", "  " + server_command(export, only.config.flags, only.last)]
    else:
        lines += ["", "the choice changes with load:"]
        lines += [f"  {_requests(item.first, item.last):<16} {item.config.label}" for item in plan.ranges]
        lines += ["what to type under load, one server per range:"]
        lines += [f"  {_requests(item.first, item.last)}: {server_command(export, item.config.flags, item.last)}"
                  for item in plan.ranges]
    lines.append(f"  (-np N serves N requests at once; -c is shared by the slots: {SLOT_CONTEXT} tokens of context each)")
    return lines + _unified_lines(export, plan)


def _unified_lines(export: EngineExport, plan: LoadPlan) -> list[str]:
    """The best configuration with `--kv-unified` at each count from 2 up (`LoadRanking.unified`),
    where it beats the choice: llama-server at -np N keeps a KV stream per slot and splits a decode
    whose slots carry unequal rows into several passes; one stream decodes it in one."""
    better = [ranking for ranking in plan.rankings
              if ranking.unified is not None and ranking.unified.speedup > ranking.chosen.speedup]
    if not better:
        return []
    attention = ("priced from the target's step timed split and unified" if all(ranking.unified_attention for ranking in better)
                 else "not priced")
    lines = ["", "with --kv-unified (one KV stream for all slots: each iteration one forward pass where -np N alone splits "
                 f"slots of unequal drafts into several; every row's attention then spans every slot's cells, {attention}; "
                 "`bench peers --clients` races it):"]
    lines += _table(better, [(ranking.unified.label, ranking.unified) for ranking in better])
    lines += [f"  {ranking.clients} requests: {server_command(export, ranking.unified.flags, ranking.clients)}" for ranking in better]
    return lines


# --------------------------------------------------------------------------- vLLM


def vllm_schedule(plan: LoadPlan) -> list[list[int]]:
    """vLLM's `VLLM_SCHEDULE_KEY`: [first, last, K] over batch sizes from 1, each count asked
    covering the sizes up to the next one's (vLLM keeps the last entry's K above it), equal
    neighbours merged."""
    entries: list[list[int]] = []
    steps = plan.vllm
    for index, step in enumerate(steps):
        first = 1 if index == 0 else step.clients
        last = steps[index + 1].clients - 1 if index + 1 < len(steps) else step.clients
        if entries and entries[-1][2] == step.block_size:
            entries[-1][1] = last
        else:
            entries.append([first, last, step.block_size])
    return entries


def vllm_config(export: EngineExport, plan: LoadPlan) -> dict:
    """The export's vLLM speculative config with the per-batch-size schedule (`VLLM_VERSION` on)."""
    from polyplan.engines.export import engine_config

    return {**engine_config(export), VLLM_SCHEDULE_KEY: vllm_schedule(plan)}


def vllm_command(export: EngineExport, plan: LoadPlan) -> str:
    return f"vllm serve {shlex.quote(export.target_source)} --speculative-config {shlex.quote(json.dumps(vllm_config(export, plan)))}"


def _vllm_lines(export: EngineExport, plan: LoadPlan, counts: str) -> list[str]:
    option = export.chosen
    rows = [(f"{option.drafter} K={step.block_size}" if step.block_size else f"off: {option.drafter} K={option.block_size} does not pay",
             step.row) for step in plan.vllm]
    lines = ["", f"under load: vLLM with N requests in a batch, N = {counts}; {option.drafter} ({option.method}) at K = "
                 f"{option.block_size}, predicted aggregate decode speedup over the target alone at the same N "
                 f"[{LEVEL:.0%} interval for the workload's mean], the physical limit at N and the target alone's tokens/s:"]
    lines += _table(plan.rankings, rows)
    lines += _off_line(plan, option.drafter)
    lines += [f"predicted from the profile's T(k) (timed on {export.server_request.pricing.profile.device}) at the width a batch "
              "of N verifications reaches, with polyplan's loop: polyplan does not model vLLM's own costs under load (its "
              "kernels, batching and scheduler on a GPU); time the target on the serving machine and re-plan before relying "
              "on the schedule",
              f"written for vLLM {VLLM_VERSION} or newer: speculative_config's {VLLM_SCHEDULE_KEY} (K 0 turns speculation off "
              "for those batch sizes; sizes between the counts asked keep the K below them, sizes above the last keep its K)",
              "what to type under load:", "  " + vllm_command(export, plan)]
    return lines


# --------------------------------------------------------------------------- JSON


def _loaded_json(config: LoadedConfig) -> dict:
    return {"label": config.label, "flags": list(config.flags), "clients": config.clients, "predicted_speedup": config.speedup,
            "interval": None if config.interval is None else list(config.interval),
            "workload_interval": None if config.workload_interval is None else list(config.workload_interval),
            "tokens_per_s": config.tokens_per_s, "request_tokens_per_s": config.request_tokens_per_s,
            "overlap": config.overlap, "note": config.note or None}


def load_json(export: EngineExport, plan: LoadPlan) -> dict:
    """The `under_load` object of `polyplan export --json` (and `recommend --json`): every ranking."""
    payload = {
        "engine": plan.engine,
        "clients": list(plan.clients),
        "rankings": [{"clients": ranking.clients, "chosen": _loaded_json(ranking.chosen), "limit": ranking.limit,
                      "target_tokens_per_s": ranking.target_tokens_per_s,
                      "configs": [_loaded_json(config) for config in ranking.configs],
                      "kv_unified": None if ranking.unified is None else _loaded_json(ranking.unified)}
                     for ranking in plan.rankings],
        "off_from": plan.off_from,
        "slot_context": SLOT_CONTEXT,
    }
    if plan.engine == "vllm":
        payload["vllm"] = {"version": VLLM_VERSION, "schedule": vllm_schedule(plan), "config": vllm_config(export, plan),
                           "command": vllm_command(export, plan),
                           "steps": [{"clients": step.clients, "block_size": step.block_size,
                                      "row": None if step.row is None else _loaded_json(step.row)} for step in plan.vllm],
                           "predicted_from": "the profile's T(k) and polyplan's loop; vLLM's own costs under load not modelled"}
        return payload
    payload["ranges"] = [{"first": item.first, "last": item.last, "config": _loaded_json(item.config),
                          "command": server_command(export, item.config.flags, item.last)} for item in plan.ranges]
    return payload
