"""`bench peers --engine llama.cpp --clients 1,2,4`: llama-server's configurations under load.

For each number of clients N, every configuration the peers race runs (`race.server_configs`)
gets a llama-server with N parallel slots (`server.slot_args`), and a bounded load generator
(`run_load`) sends it the prompts from N client threads at once, each client its share back to
back. The configurations take turns, a whole load each, in an order rotated every repeat. Each
(configuration, N) is a `formats.race.LoadRow`: aggregate decode throughput (`aggregate_tokens_per_s`),
per-request decode speed, time to first token, its speedup over the target alone at the same N,
judged against the plan's prediction at N (`planner.llama_cpp.under_load`) as the race at one
request judges; each N a `formats.race.LoadLevel`: the fastest, the plan's choice, the physical
limit. The split (`priced_on_answers`) prices each prediction again on the race's own answers, as
the race at one request does, so that what is left of an error is the cost model's, not the
workload's. docs/engines.md, "`polyplan bench peers`".
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from polyplan.engines.llama_cpp.race import CONTROL, TARGET_ONLY, race_setup, server_configs, server_needs
from polyplan.planner.llama_cpp.under_load import UNIFIED_FLAG
from polyplan.engines.llama_cpp.race_memory import GB, MemoryNeed, ModelMemory, group_bytes, gguf_memory, race_groups, usable_memory
from polyplan.engines.llama_cpp.server import Completion, LlamaServer, slot_args
from polyplan.engines.race import Contender
from polyplan.formats.errors import PolyplanError
from polyplan.formats.race import LoadLevel, LoadRace, LoadRow, RequestSpan, control_spread, load_split, not_slower, union_seconds

SPEC_DEFAULT = "llama.cpp default (--spec-default)"
SLOT_HEADROOM = 64  # tokens of a slot's context beyond the longest prompt and its new tokens (a last draft's)
CONTEXT_PAD = 256  # llama.cpp pads a context up to a multiple of this (a slot's too, so that -c divides evenly)
REQUEST_TIMEOUT_S = 600.0  # one request's limit: a load run always ends
UNMATCHED = "not predicted under load (the plan ranks no such configuration)"
UNPREDICTED = "not predicted (the plan was not ranked under load: the prediction line says why)"


@dataclass(frozen=True)
class LoadRequest:
    """One request of a load run: which client sent which prompt, its wall start and end (seconds
    on the run's clock), and the server's account of it (`server.Completion`)."""

    client: int
    prompt: int
    start_s: float
    end_s: float
    tokens: tuple[int, ...]
    decoded: int  # tokens generated (the server's predicted_n)
    decode_s: float  # the server's decode time (its predicted_ms / 1000)
    first_token_s: float | None = None  # from sending to the first token's chunk, seen from the client
    drafted: int = 0
    accepted: int = 0

    @property
    def decode_interval(self) -> tuple[float, float]:
        """When it decoded, on the wall clock: its decode time ending at its end."""
        return self.end_s - self.decode_s, self.end_s

    @property
    def tokens_per_s(self) -> float:
        return self.decoded / self.decode_s if self.decode_s > 0 else math.nan


@dataclass(frozen=True)
class LoadRun:
    """One configuration's whole load at `clients` clients in one repeat: its requests in the order
    they ended, and why it stopped where a client failed (the others finished)."""

    label: str
    clients: int
    repeat: int
    requests: tuple[LoadRequest, ...]
    group: int = 0
    failure: str | None = None


def run_load(send: Callable[[Sequence[int]], Completion], prompts: Sequence[Sequence[int]], clients: int, *, label: str = "",
             repeat: int = 0, group: int = 0, clock: Callable[[], float] = time.perf_counter) -> LoadRun:
    """`clients` threads send `prompts` through `send(ids)` at once, prompt i by client i mod
    `clients`, each its prompts back to back. `send` must be bounded (`LlamaServer.stream` is:
    every request has a timeout), so the run ends by itself; every thread is joined before this
    returns. A client whose request fails (PolyplanError, OSError) stops; the others finish, and
    the run carries the first failure."""
    if clients < 1:
        raise PolyplanError(f"--clients: must be >= 1, got {clients}")
    began = clock()
    done: list[LoadRequest] = []
    failures: list[str] = []
    lock = threading.Lock()

    def client(number: int) -> None:
        for index in range(number, len(prompts), clients):
            start = clock() - began
            try:
                answer = send(prompts[index])
            except (PolyplanError, OSError) as error:
                with lock:
                    failures.append(f"client {number + 1} of {clients}, prompt {index}: {error}")
                return
            end = clock() - began
            request = LoadRequest(number, index, start, end, tuple(answer.token_ids), answer.predicted_n,
                                  answer.predicted_ms / 1000.0,
                                  None if answer.first_token_s is None else answer.first_token_s,
                                  answer.draft_n, answer.draft_accepted)
            with lock:
                done.append(request)

    threads = [threading.Thread(target=client, args=(number,), name=f"polyplan-load-client-{number}", daemon=True)
               for number in range(min(clients, max(len(prompts), 1)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return LoadRun(label, clients, repeat, tuple(sorted(done, key=lambda request: request.end_s)), group,
                   failures[0] if failures else None)


def aggregate_tokens_per_s(requests: Sequence[LoadRequest]) -> float:
    """Decode throughput of requests served together: all their decoded tokens over the length of
    the union of their decode intervals (one request at a time: the pooled decode rate)."""
    span = union_seconds([request.decode_interval for request in requests])
    return sum(request.decoded for request in requests) / span if span > 0 else math.nan


def request_tokens_per_s(requests: Sequence[LoadRequest]) -> float:
    """The mean over requests of each one's decode speed (decoded / decode seconds)."""
    rates = [request.tokens_per_s for request in requests if request.decode_s > 0]
    return statistics.fmean(rates) if rates else math.nan


def first_token_s(requests: Sequence[LoadRequest]) -> float:
    """Mean time to first token over the requests that timed one."""
    times = [request.first_token_s for request in requests if request.first_token_s is not None]
    return statistics.fmean(times) if times else math.nan


def race_under_load(groups: Mapping[int, Sequence[Sequence[Contender]]],
                    start: Callable[[Contender, int], contextlib.AbstractContextManager], prompts: Sequence[Sequence[int]], *,
                    repeats: int, new_tokens: int, timeout_s: float = REQUEST_TIMEOUT_S, log=lambda line: None,
                    on_run: Callable[[int, int, str], None] | None = None,
                    ignore_eos: bool = True) -> tuple[list[LoadRun], dict[tuple[str, int], str]]:
    """For each clients N of `groups` (N: its memory groups of configurations, the target alone
    first in each), start each group's servers (`start(config, N)`: a context manager giving a
    `LlamaServer`-like server with N slots), run every configuration's load `repeats` times, in
    an order rotated each repeat, and stop them before the next group. `on_run(done, total,
    label)` hears of each load run; `ignore_eos` False: each request ends at the target's end of
    sequence (or `new_tokens`).

    Returns the runs of every configuration that did not fail, and by (label, N) why each failed:
    failed to start, stopped answering (its server's last log line), or no baseline (the target
    alone failed at that N); nothing is left running.
    """
    runs: list[LoadRun] = []
    failures: dict[tuple[str, int], str] = {}
    total = sum(len(group) * repeats for groups_at in groups.values() for group in groups_at)
    done = 0

    def ran(label: str) -> None:
        nonlocal done
        done += 1
        if on_run is not None:
            on_run(done, total, label)

    for clients, groups_at in groups.items():
        for number, group in enumerate(groups_at):
            prefix = f"{clients} client(s)" + (f", group {number + 1}/{len(groups_at)}" if len(groups_at) > 1 else "")
            with contextlib.ExitStack() as stack:
                servers = {}
                for config in group:
                    try:
                        servers[config.label] = stack.enter_context(start(config, clients))
                    except (PolyplanError, OSError) as error:
                        failures[(config.label, clients)] = f"failed to start: {error}"
                        log(f"{prefix}: {config.label}: {failures[(config.label, clients)]}")
                        total -= repeats
                base = group[0].label
                for repeat in range(repeats):
                    live = [config for config in group if (config.label, clients) not in failures]
                    if base not in servers or (base, clients) in failures:
                        break
                    shift = repeat % len(live)
                    for config in [*live[shift:], *live[:shift]]:
                        if (config.label, clients) in failures:
                            continue
                        server = servers[config.label]
                        run = run_load(lambda ids, server=server: server.stream(ids, new_tokens, timeout_s, ignore_eos), prompts, clients,
                                       label=config.label, repeat=repeat, group=number)
                        ran(config.label)
                        if run.failure is not None:
                            failures[(config.label, clients)] = f"stopped answering: {run.failure}"
                            log(f"{prefix}: {config.label}: {failures[(config.label, clients)]}")
                            total -= repeats - repeat - 1
                            continue
                        runs.append(run)
                    log(f"{prefix}: repeat {repeat + 1}/{repeats} done")
                if (base, clients) in failures:
                    for config in group[1:]:
                        failures.setdefault((config.label, clients), f"no baseline at {clients} client(s): {base} "
                                                                     f"{failures[(base, clients)]}")
    return [run for run in runs if (run.label, run.clients) not in failures], failures


def load_rows(configs: Sequence[Contender], runs: Sequence[LoadRun], failures: Mapping[tuple[str, int], str],
              clients: Sequence[int], rankings: Mapping[int, object] = {}) -> tuple[tuple[LoadRow, ...], tuple[LoadLevel, ...]]:
    """A row per configuration and clients, and a level per clients (`formats.race.LoadLevel`).
    `rankings`: the plan under load by clients (`planner.llama_cpp.under_load.LoadRanking`), whose
    configurations are matched to `configs` by their flags (the target alone to its off row)."""
    rows: list[LoadRow] = []
    levels: list[LoadLevel] = []
    for count in clients:
        ranking = rankings.get(count)
        at = [_row(config, count, runs, failures.get((config.label, count)), ranking) for config in configs
              if races_at(config, count)]
        spread = control_spread(at)
        at = [row if spread is None or row.label in (CONTROL, TARGET_ONLY) else dataclasses.replace(row, server_spread=spread)
              for row in at]
        rows += at
        levels.append(_level(count, at, ranking, configs, spread or 0.0))
    return tuple(rows), tuple(levels)


def _row(config: Contender, clients: int, runs: Sequence[LoadRun], failure: str | None, ranking) -> LoadRow:
    """One configuration's row at `clients` (see `load_rows`)."""
    predicted = _prediction(config, ranking)
    known = dict(predicted_speedup=None if predicted is None else predicted.speedup,
                 predicted_interval=None if predicted is None else predicted.interval,
                 predicted_tokens_per_s=None if predicted is None else predicted.tokens_per_s,
                 predicted_request_tokens_per_s=None if predicted is None else predicted.request_tokens_per_s,
                 predicted_overlap=None if predicted is None else predicted.overlap,
                 chosen=predicted is not None and ranking is not None and config.label != CONTROL
                 and tuple(predicted.flags) == tuple(ranking.chosen.flags) and config.args != ("--spec-default",),
                 unjudged=None if predicted is not None else UNMATCHED if ranking is not None else UNPREDICTED)
    if config.label == CONTROL and ranking is not None:
        known.update(predicted_speedup=1.0, predicted_interval=(1.0, 1.0), unjudged=None)
    if failure is not None:
        return LoadRow(config.label, clients, failure=failure, **known)
    mine = [run for run in runs if run.label == config.label and run.clients == clients]
    if not mine:
        return LoadRow(config.label, clients, failure="not run", **known)
    base = {(run.group, run.repeat): run for run in runs if run.label == TARGET_ONLY and run.clients == clients}
    aggregate = [aggregate_tokens_per_s(run.requests) for run in mine]
    speed = [request_tokens_per_s(run.requests) for run in mine]
    first = [first_token_s(run.requests) for run in mine]
    ratios = [value / aggregate_tokens_per_s(base[(run.group, run.repeat)].requests)
              for run, value in zip(mine, aggregate) if (run.group, run.repeat) in base]
    paired, equal = [], 0
    for run in mine:
        other = base.get((run.group, run.repeat))
        answers = {} if other is None else {request.prompt: request for request in other.requests}
        for request in run.requests:
            twin = answers.get(request.prompt)
            if twin is None:
                continue
            equal += request.tokens == twin.tokens
            if request.decode_s > 0 and twin.decode_s > 0:
                paired.append(request.tokens_per_s / twin.tokens_per_s)
    requests = [request for run in mine for request in run.requests]
    drafted = sum(request.drafted for request in requests)
    timeline = tuple(RequestSpan(run.repeat, request.client, request.prompt, request.start_s, request.decode_interval[0],
                                 request.end_s, request.decoded, request.drafted, request.accepted)
                     for run in mine for request in run.requests)
    return LoadRow(config.label, clients, *_mean_sd(aggregate), *_mean_sd(speed), *_mean_sd(first), *_mean_sd(ratios),
                   request_speedup=statistics.fmean(paired) if paired else None,
                   request_speedup_sd=statistics.stdev(paired) if len(paired) > 1 else 0.0,
                   repeats=len(mine), requests=len(requests), decoded=sum(request.decoded for request in requests),
                   accepted_per_drafted=sum(request.accepted for request in requests) / drafted if drafted else None,
                   equal_outputs=equal, group=mine[0].group + 1 if any(run.group for run in runs) else None,
                   timeline=timeline, **known)


def races_at(config: Contender, clients: int) -> bool:
    """Whether `config` is raced at `clients`: a `--kv-unified` row from 2 clients up only (one
    slot has one KV stream whatever the flag says: nothing for it to change)."""
    return clients > 1 or UNIFIED_FLAG not in config.args


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    finite = [value for value in values if math.isfinite(value)]
    if not finite:
        return math.nan, 0.0
    return statistics.fmean(finite), statistics.stdev(finite) if len(finite) > 1 else 0.0


def ranked_flags(config: Contender) -> tuple[str, ...]:
    """The flags the plan ranks `config` under (`--spec-default` is ngram-mod at its defaults)."""
    from polyplan.planner.llama_cpp.ngram_rules import SPEC_DEFAULT_FLAGS

    return SPEC_DEFAULT_FLAGS if config.args == ("--spec-default",) else tuple(config.args)


def _prediction(config: Contender, ranking):
    """`ranking`'s configuration for `config` (None: no ranking, or it ranks none such)."""
    from polyplan.planner.llama_cpp.ranking import OFF

    if ranking is None or config.label == CONTROL:
        return None
    if config.label == TARGET_ONLY:
        return next((loaded for loaded in ranking.configs if loaded.label == OFF), None)
    flags = ranked_flags(config)
    if ranking.unified is not None and tuple(ranking.unified.flags) == flags:
        return ranking.unified
    return next((loaded for loaded in ranking.configs if tuple(loaded.flags) == flags), None)


def _level(clients: int, rows: Sequence[LoadRow], ranking, configs: Sequence[Contender], spread: float) -> LoadLevel:
    """The fastest measured at `clients`, the plan's choice and how it fared (`LoadLevel`): tied
    where the two rows' measured 95% intervals, the gap between them widened by `spread` (the
    control's offset at these clients), overlap: whichever row was chosen, the target alone (no
    spread of its own) included, and a fastest row whose own repeats disagree is not called faster."""
    measured = [row for row in rows if row.failure is None and row.label != CONTROL and math.isfinite(row.speedup)]
    fastest = max(measured, key=lambda row: row.speedup, default=None)
    spec_default = next((config.label for config in configs if config.args == ("--spec-default",)), None)
    if ranking is None:
        return LoadLevel(clients, None if fastest is None else fastest.label, None, None, None, spec_default,
                         "no prediction under load")
    chosen = next((row for row in rows if row.chosen), None)
    label = ranking.chosen.label if chosen is None else chosen.label
    if chosen is None or fastest is None or chosen.failure is not None or not math.isfinite(chosen.speedup):
        return LoadLevel(clients, None if fastest is None else fastest.label, label, None, ranking.limit, spec_default,
                         "the plan's choice was not measured")
    if chosen.label == fastest.label:
        choice = "fastest"
    else:
        choice = "tied" if not_slower(chosen, fastest, spread) else "slower"
    return LoadLevel(clients, fastest.label, chosen.label, choice, ranking.limit, spec_default)


def with_ranked(configs: Sequence[Contender], rankings: Mapping[int, object]) -> list[Contender]:
    """`configs` and every configuration a ranking holds that none of them runs (each prediction
    is raced), without their one-request predictions (those of the load rows are per clients)."""
    from polyplan.planner.llama_cpp.ranking import OFF

    out = [Contender(config.label, tuple(config.args)) for config in configs]
    raced = {ranked_flags(config) for config in out} | {tuple(config.args) for config in out}
    for ranking in rankings.values():
        for loaded in (*ranking.configs, *(() if ranking.unified is None else (ranking.unified,))):
            if loaded.label != OFF and tuple(loaded.flags) not in raced:
                raced.add(tuple(loaded.flags))
                out.append(Contender(loaded.label, tuple(loaded.flags)))
    return out


def only_configs(configs: Sequence[Contender], patterns: Sequence[str] | None, rankings: Mapping[int, object]) -> list[Contender]:
    """`configs` narrowed to those whose label contains one of `patterns` (None: all), always
    keeping the target alone, its control and the plan's choice at each count (the speedups, the
    noise and the judgement of the choice need them).

    Raises:
        PolyplanError: a pattern that names no configuration (the labels listed).
    """
    from polyplan.planner.llama_cpp.ranking import OFF

    if patterns is None:
        return list(configs)
    unknown = [pattern for pattern in patterns if not any(pattern in config.label for config in configs)]
    if unknown:
        raise PolyplanError(f"--configs: {', '.join(map(repr, unknown))} names no configuration of this race; its labels: "
                            + "; ".join(config.label for config in configs))
    chosen = {ranking.chosen.label for ranking in rankings.values() if ranking.chosen.label != OFF}
    return [config for config in configs if config.label in (TARGET_ONLY, CONTROL) or config.label in chosen
            or any(pattern in config.label for pattern in patterns)]


def slot_context(prompts: Sequence[Sequence[int]], new_tokens: int) -> int:
    """Tokens one slot needs: the longest prompt, its new tokens and `SLOT_HEADROOM`, rounded up
    to `CONTEXT_PAD` (the context llama.cpp allocates: it pads `-c`, then divides it among the
    slots), so the memory estimate counts what the server holds."""
    need = max((len(prompt) for prompt in prompts), default=0) + new_tokens + SLOT_HEADROOM
    return -(-need // CONTEXT_PAD) * CONTEXT_PAD


def load_groups(configs: Sequence[Contender], target: ModelMemory, clients: Sequence[int], context: int, available: int, *,
                mapped: bool, memory: Callable[[str], ModelMemory] = gguf_memory
                ) -> tuple[dict[int, tuple[tuple[Contender, ...], ...]], dict[tuple[str, int], str]]:
    """Per clients N, the configurations in memory groups that fit `available` bytes (the target
    alone first in each, `race_memory.race_groups`), each server at N slots of `context` tokens:
    N slots multiply every model's KV cache; and by (label, N) why a configuration too large even
    beside the target alone is not started.

    Raises:
        PolyplanError: the target alone's server at some clients asked does not fit, with the
            estimate and the most clients that would.
    """
    by_label = {config.label: config for config in configs}
    resident = MemoryNeed("this process", 0)
    groups, too_large = {}, {}
    for count in clients:
        needs = server_needs([config for config in configs if races_at(config, count)], target, count * context,
                             mapped=mapped, memory=memory)
        alone = group_bytes([needs[0]])
        if alone > available:
            slot = target.kv_bytes_per_token * context
            fits = int((available - (alone - count * slot)) // slot) if slot else 0
            most = f"at most {fits} fit" if fits >= 1 else "not even one fits"
            raise PolyplanError(f"--clients {count}: {TARGET_ONLY} with {count} slots of {context} tokens needs "
                                f"{alone / GB:.1f} GB (its KV cache {count * slot / GB:.2f} GB: {count} slots x "
                                f"{slot / GB:.3f} GB), {available / GB:.1f} GB available; {most}: ask fewer clients")
        grouped = race_groups(needs[0], needs[1:], resident, available)
        groups[count] = tuple(tuple(by_label[label] for label in group) for group in grouped.groups)
        for label, needed in grouped.too_large:
            too_large[(label, count)] = (f"not started: {count} slots need {needed / GB:.1f} GB together with {TARGET_ONLY}, "
                                         f"{available / GB:.1f} GB available")
    return groups, too_large


def run_llama_load_race(plan_path, clients: Sequence[int], *, prompts_path=None, candidates_path=None, threads: int | None = None,
                        repeats: int = 2, new_tokens: int = 64, max_prompts: int | None = None, timeout_s: float = REQUEST_TIMEOUT_S,
                        log=lambda line: None, on_run=None, only: Sequence[str] | None = None, stop_at_eos: bool = True) -> LoadRace:
    """Race llama-server's configurations at each of `clients` concurrent clients (module
    docstring), judged against the plan under load (`engines.load_plan.plan_under_load`).
    `threads` None: as the plan's profile was measured; `only`: label patterns to race
    (`only_configs`; None: every configuration); `stop_at_eos` (the default): each request ends
    at the target's end of sequence (or `new_tokens`), as a server's requests do, and is
    predicted so (greedy decoding is lossless: every configuration stops at the same token);
    False: every request decodes exactly `new_tokens`, past end of sequence, where a draft model
    agrees less with the target than on the text the profile measured.

    Raises:
        PolyplanError: bad settings, no build, a plan polyplan cannot race, or more slots than
            memory allows (`load_groups`).
    """
    from transformers import AutoTokenizer

    from polyplan.engines.export import engine_files, export_from_files
    from polyplan.formats.cache import cache_root
    from polyplan.models.gguf_source import tokenizer_folder_for_gguf
    from polyplan.planner.llama_cpp.ranking import ReplayWorkload
    from polyplan.profiler.prompt_sets import encode_for, validation_prompt_set

    clients = tuple(sorted(set(clients)))
    if not clients or clients[0] < 1:
        raise PolyplanError(f"--clients: each must be >= 1, got {', '.join(map(str, clients)) or 'none'}")
    build, plan, choice, candidates = race_setup(plan_path, candidates_path, threads, repeats, new_tokens, log)
    target = candidates.target
    prompts = validation_prompt_set(prompts_path, max_prompts=max_prompts)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_folder_for_gguf(target.source)), local_files_only=True)
    encoded = [prompt.ids for prompt in encode_for(prompts, tokenizer)]
    target_memory = gguf_memory(target.source)
    context = slot_context(encoded, new_tokens)
    load_groups([Contender(TARGET_ONLY)], target_memory, clients, context, usable_memory(),
                mapped=False)  # more slots than memory allows: said before anything is priced or started
    exported = export_from_files(plan_path, "llama.cpp", candidates_path=candidates_path, log=log, clients=clients)
    files = engine_files(candidates)
    raced = server_configs(plan, exported, candidates, files)
    export = export_from_files(plan_path, "llama.cpp", candidates_path=candidates_path,
                               workload=ReplayWorkload.sent(new_tokens, repeats, len(prompts.prompts), to_eos=stop_at_eos,
                                                            slot_context=context),
                               replay_also=[ranked_flags(config) for config in raced], clients=clients)
    rankings, predicted_note = _rankings(export, clients)
    logs = cache_root() / "engines" / "logs" / time.strftime("%Y%m%d-%H%M%S-load")

    def start(config: Contender, count: int, context: int, name: str) -> LlamaServer:
        log(f"starting llama-server ({count} slot(s)): {config.label}")
        args = ("-t", str(choice.threads), "-tb", str(choice.threads), *slot_args(count, context), "--no-webui", "--no-warmup",
                *export.server_flags, *config.args)
        return LlamaServer(build.server, Path(target.source), args, logs / f"server-{name}.log")

    rows, levels, context, runs = race_load(raced, rankings, encoded, start, clients, target_memory,
                                            mapped="--no-repack" in export.server_flags, repeats=repeats, new_tokens=new_tokens,
                                            timeout_s=timeout_s, log=log, on_run=on_run, only=only, ignore_eos=not stop_at_eos)
    rows = _split(rows, load_streams(runs, encoded), (plan_path, plan, candidates_path, candidates), with_ranked(raced, rankings),
                  rankings, clients, choice.threads, ReplayWorkload.sent(new_tokens, repeats, 0, to_eos=stop_at_eos,
                                                                         slot_context=context), log)
    import llama_cpp

    notes = (("prediction", predicted_note),
             ("prompts", prompts_note(plan, prompts, clients)),
             ("measures", "aggregate: all requests' decoded tokens over the union of their decode intervals (each request's "
                          "server decode time ending at its end, on the wall clock); per request: the mean of decoded / decode "
                          "time; first token: from sending to the first streamed token, seen from the client; speedup: the "
                          "aggregate over the target alone's at the same clients and repeat, mean ± sd over repeats"),
             ("requests", f"each request ends at the target's end of sequence or after {new_tokens} tokens (--stop-at-eos)"
                          if stop_at_eos else f"each request decodes exactly {new_tokens} tokens, end of sequence ignored "
                                              "(--past-eos)"))
    about = (("llama_cpp_version", llama_cpp.__version__), ("chat_template", str(not prompts.raw)), ("logs", str(logs)))
    return LoadRace("llama.cpp", clients, rows, levels, len(encoded), new_tokens, repeats, choice.threads, context, choice.source,
                    notes, about)


def plan_prompt_file(plan) -> str | None:
    """The prompt file the plan's numbers are for: the one it was re-priced for
    (`formats.plan.ProfileRecord.prompt_file`), else its profile's (None: built-in prompts, or a
    profile that cannot be read)."""
    from polyplan.formats.profile import read_profile

    if plan.profile.prompt_file:
        return plan.profile.prompt_file
    try:
        recorded = read_profile(plan.profile.path).profiler if plan.profile.path else None
    except PolyplanError:
        return None
    return None if recorded is None else recorded.prompt_file


def prompts_note(plan, prompts, clients: Sequence[int]) -> str:
    """Which prompts the predictions are for beside the race's `prompts` (`PromptSet`): an n-gram
    type's worth is its prompts' own repetition, so a race on other prompts than the plan's
    measures them, not the cost model (the split prices every row on the race's answers either
    way); the command that re-prices the plan for the race's prompts where they differ."""
    planned = plan_prompt_file(plan)
    sent = Path(prompts.source) if not prompts.truncate else None  # a user's file (built-in prompts may be cut)
    if planned is not None and sent is not None and Path(planned).resolve() == sent.resolve():
        return f"prompts: the plan's numbers are for this race's own prompts ({sent.name})"
    if planned is not None and sent is not None and _same_prompts(planned, prompts):
        return (f"prompts: the plan's numbers are for this race's own prompts ({sent.name}, the same "
                f"{len(prompts.prompts)} as {Path(planned).name})")
    where = "built-in prompts" if planned is None else Path(planned).name
    if sent is None:
        return (f"prompts: the plan's numbers are for {where}; this race sends polyplan's built-in validation prompts, "
                "which the profile never saw (the split below prices every row on this race's answers)")
    return (f"prompts: the plan's numbers are for {where}, this race sends {sent.name}: an n-gram type's worth is its "
            "prompts' own repetition (the split below prices every row on this race's answers); to predict for these "
            f"prompts, re-price the plan first: polyplan recommend --profile {plan.profile.path} --prompts {sent} "
            f"--concurrency {','.join(map(str, clients))} (the target's streams and the agreement runs only)")


def _same_prompts(planned: str, prompts) -> bool:
    """Whether the plan's prompt file holds exactly the race's prompts, in order (a race's
    `--max-prompts` cut of a longer file, say); False where that file cannot be read."""
    from polyplan.profiler.prompt_sets import prompt_set

    try:
        texts = [prompt.text for prompt in prompt_set(planned).prompts]
    except (OSError, PolyplanError):
        return False
    return texts == [prompt.text for prompt in prompts.prompts]


def race_load(raced: Sequence[Contender], rankings: Mapping[int, object], prompts: Sequence[Sequence[int]],
              start: Callable[[Contender, int, int, str], contextlib.AbstractContextManager], clients: Sequence[int],
              target: ModelMemory, *, mapped: bool, repeats: int, new_tokens: int, timeout_s: float = REQUEST_TIMEOUT_S,
              available: int | None = None, memory: Callable[[str], ModelMemory] = gguf_memory, log=lambda line: None,
              on_run=None, only: Sequence[str] | None = None, ignore_eos: bool = True
              ) -> tuple[tuple[LoadRow, ...], tuple[LoadLevel, ...], int, list[LoadRun]]:
    """The race under load of `raced` and every configuration `rankings` holds besides
    (`with_ranked`), narrowed to `only` (`only_configs`), on `prompts` at each of `clients`: memory groups (`load_groups`, `available`
    None: the machine's usable memory), the race (`race_under_load`; `start(config, N, slot
    context, name)` a server with N slots of that many tokens, `name` unique for its log), the
    rows and levels (`load_rows`); the slot context; and the runs.

    Raises:
        PolyplanError: more slots than memory allows (`load_groups`).
    """
    configs = only_configs(with_ranked(raced, rankings), only, rankings)
    context = slot_context(prompts, new_tokens)
    available = usable_memory() if available is None else available
    groups, too_large = load_groups(configs, target, clients, context, available, mapped=mapped, memory=memory)
    log(f"memory: each server at N slots of {context} tokens (-c N x {context}), {available / GB:.1f} GB available; "
        + "; ".join(f"{count} client(s): {len(groups[count])} group(s)" for count in clients))
    index = {config.label: number for number, config in enumerate(configs)}
    runs, failures = race_under_load(groups, lambda config, count: start(config, count, context, f"{count}-{index[config.label]}"),
                                     prompts, repeats=repeats, new_tokens=new_tokens, timeout_s=timeout_s, log=log, on_run=on_run,
                                     ignore_eos=ignore_eos)
    rows, levels = load_rows(configs, runs, {**too_large, **failures}, clients, rankings)
    return rows, levels, context, runs


def load_streams(runs: Sequence[LoadRun], prompts: Sequence[Sequence[int]]) -> tuple:
    """The target alone's answer to each prompt in this race (at its fewest clients, first repeat),
    as target streams (`formats.profile.TargetStream`), in the prompts' order: the tokens every
    configuration decoded, end-of-sequence ignored."""
    from polyplan.formats.profile import TargetStream

    answers: dict[int, tuple[int, ...]] = {}
    for run in sorted((run for run in runs if run.label == TARGET_ONLY), key=lambda run: (run.clients, run.repeat, run.group)):
        for request in run.requests:
            answers.setdefault(request.prompt, request.tokens)
    return tuple(TargetStream(len(prompt), tuple(prompt) + answers[index])
                 for index, prompt in enumerate(prompts) if answers.get(index) and len(prompt) > 0)


def priced_on_answers(rows: Sequence[LoadRow], configs: Sequence[Contender], rankings: Mapping[int, object],
                      drafts: frozenset[str] = frozenset()) -> tuple[LoadRow, ...]:
    """`rows` with `race_priced`: the plan under load priced on the race's answers (`rankings`,
    by clients), for each n-gram type and for each draft model among `drafts` (the files whose
    agreement with the answers was measured); the target alone, its control and anything else keep
    None."""
    from polyplan.engines.llama_cpp.race import draft_file

    by_label = {config.label: config for config in configs}
    out = []
    for row in rows:
        config = by_label.get(row.label)
        priced = None
        if config is not None and row.label not in (TARGET_ONLY, CONTROL) and ("-md" not in config.args
                                                                             or draft_file(config.args) in drafts):
            found = _prediction(config, rankings.get(row.clients))
            priced = None if found is None else found.speedup
        out.append(row if priced is None else dataclasses.replace(row, race_priced=priced))
    return tuple(out)


def _split(rows: Sequence[LoadRow], streams: Sequence, planned: tuple, configs: Sequence[Contender],
           rankings: Mapping[int, object], clients: Sequence[int], threads: int, workload, log) -> tuple[LoadRow, ...]:
    """`rows` priced on this race's answers (`priced_on_answers`): `streams` (`load_streams`), each
    raced draft model's agreement with them (teacher-forced through the bindings), the plan under
    load (`planned`: its path, the plan, the candidates' path and the candidates) priced on them as
    this race sent them (`workload`, its prompt count set to the answers'); the rows as they were,
    with one line saying why, where that cannot be done (a race keeps what it measured)."""
    from polyplan.engines.export import engine_files, export_from_files
    from polyplan.engines.llama_cpp.race import draft_files, race_agreements_of
    plan_path, plan, candidates_path, candidates = planned
    if not streams or not rankings:
        return tuple(rows)
    try:
        agreements, measured = race_agreements_of(configs, draft_files(candidates, engine_files(candidates)), plan.target, threads,
                                                  streams, log)
        on_race = export_from_files(plan_path, "llama.cpp", candidates_path=candidates_path, streams=tuple(streams),
                                    agreements=agreements, workload=dataclasses.replace(workload, prompts=len(streams)),
                                    replay_also=[ranked_flags(config) for config in configs], clients=clients)
        answered, _ = _rankings(on_race, clients)
    except PolyplanError as error:
        log(f"the predictions were not priced on this race's answers: {error}")
        return tuple(rows)
    return priced_on_answers(rows, configs, answered, measured)


def _rankings(export, clients: Sequence[int]) -> tuple[dict[int, object], str]:
    """The plan under load at each clients, by clients, and the note on it; none, with why, where
    the plan cannot be ranked under load (the race still measures)."""
    from polyplan.engines.load_plan import plan_under_load

    try:
        planned = plan_under_load(export, clients)
    except PolyplanError as error:
        return {}, f"predicted: nothing under load ({error})"
    return ({ranking.clients: ranking for ranking in planned.rankings},
            "predicted: the plan under load (`polyplan export --engine llama.cpp --concurrency`), its aggregate speedup "
            "over the target alone at the same clients, replayed for this race's new tokens and repeats, each client's "
            "prompts in the order it sent them")


def load_race_lines(race: LoadRace) -> list[str]:
    """The terminal tables: per clients, a row per configuration, then the fastest, the plan's
    choice, the physical limit and llama-server's default."""
    about = dict(race.about)
    lines = [f"llama-server (llama-cpp-python {about.get('llama_cpp_version')}'s llama.cpp) under load: "
             f"{', '.join(map(str, race.clients))} concurrent client(s), {race.prompts} prompts shared among them, "
             f"x {race.repeats} repeats, {race.new_tokens} new tokens, greedy, {race.threads} thread(s), -np N slots of "
             f"{race.slot_context} tokens; configurations in turn, a whole load each, the order rotated each repeat",
             *[line for line in (race.note("requests"), race.note("measures"), race.note("prediction"), race.note("prompts"))
               if line]]
    for level in race.levels:
        lines += ["", f"{level.clients} client(s):",
                  f"{'configuration':44s} {'agg tok/s':>13s} {'req tok/s':>13s} {'first tok s':>13s} {'overlap (pred)':>14s} "
                  f"{'speedup':>14s}  predicted [interval] (error, verdict)"]
        for row in race.at(level.clients):
            if row.failure is not None:
                lines.append(f"{row.label:44s} {row.failure}; predicted {row.judgement()}")
                continue
            lines.append(f"{row.label:44s} {_pm(row.tokens_per_s, row.tokens_per_s_sd, 1):>13s} "
                         f"{_pm(row.request_tokens_per_s, row.request_tokens_per_s_sd, 1):>13s} "
                         f"{_pm(row.first_token_s, row.first_token_s_sd, 3):>13s} {_overlap(row):>14s} "
                         f"{row.speedup:7.2f}x ±{row.speedup_sd:4.2f}  {row.judgement()}")
        lines += _level_lines(level, race.at(level.clients))
    lines += split_lines(race.rows)
    lines.append(f"\nserver logs: {about.get('logs')}")
    return lines


def _overlap(row: LoadRow) -> str:
    """`LoadRow.overlap` measured, with the simulation's in brackets where there is one."""
    measured = "-" if row.overlap is None else f"{row.overlap:.2f}"
    return measured + ("" if row.predicted_overlap is None else f" ({row.predicted_overlap:.2f})")


def split_lines(rows: Sequence[LoadRow]) -> list[str]:
    """The split (`priced_on_answers`, `formats.race.load_split`): each row's error priced on the
    profile's prompts and on this race's answers, and the mean absolute error of each."""
    split = load_split(rows)
    if split is None:
        return []
    lines = ["", "the predictions priced on this race's answers (the target alone's outputs, as long as the race "
                 "decoded them, and each draft model's agreement with them): the error left is the cost model's",
             f"{'clients':>7s}  {'configuration':44s} {'measured':>8s}  {'on the profile':>16s}  {'on the answers':>16s}"]
    for row in split.rows:
        lines.append(f"{row.clients:7d}  {row.label[:44]:44s} {row.speedup:7.2f}x  {row.predicted_speedup:7.2f}x ({100 * row.error:+5.1f}%)"
                     f"  {row.race_priced:7.2f}x ({100 * row.race_priced_error:+5.1f}%)")
    lines.append(f"mean |error| over these {len(split.rows)} rows: {100 * split.profiled:.1f}% priced on the profile's prompts, "
                 f"{100 * split.answered:.1f}% on this race's answers")
    return lines


def _pm(value: float, sd: float, digits: int) -> str:
    return "-" if not math.isfinite(value) else f"{value:.{digits}f}±{sd:.{digits}f}"


def _level_lines(level: LoadLevel, rows: Sequence[LoadRow]) -> list[str]:
    """What one clients says: the control, the fastest, the plan's choice, the limit, the default."""
    by_label = {row.label: row for row in rows}
    lines = []
    control = by_label.get(CONTROL)
    if control is not None and control.failure is None and math.isfinite(control.speedup):
        lines.append(f"control: {control.speedup:.3f}x ± {control.speedup_sd:.3f}: servers differ by about "
                     f"{100 * abs(control.speedup - 1):.1f}% by themselves, which widens every judgement at {level.clients} client(s)")
    if level.fastest is not None:
        lines.append(f"fastest at {level.clients} client(s): {level.fastest} ({by_label[level.fastest].speedup:.2f}x)")
    if level.chosen is not None:
        how = {"fastest": "the fastest", "tied": "tied with the fastest (their measured intervals, with the control's offset, overlap)",
               "slower": "slower than the fastest beyond its measured interval"}.get(level.choice, level.note)
        lines.append(f"the plan's choice: {level.chosen}: {how}")
    elif level.note:
        lines.append(f"the plan's choice: none ({level.note})")
    beside = []
    if level.limit is not None:
        beside.append(f"physical limit at {level.clients} client(s) (a free, perfect drafter): {level.limit:.2f}x")
    default = by_label.get(level.spec_default) if level.spec_default else None
    if default is not None:
        beside.append(f"{default.label}: " + (default.failure if default.failure is not None else f"{default.speedup:.2f}x"))
    if beside:
        lines.append("; ".join(beside))
    return lines
