"""`bench peers --engine llama.cpp`: the real llama-server against polyplan's plan (`engines.race`).

`run_llama_peers` starts a group's servers (`server_configs`, the pinned build on 127.0.0.1)
before timing anything, races them round-robin with polyplan's plan, in memory groups where they
do not all fit (`engines.llama_cpp.race_memory`), and judges each against the export's replay of
this race's requests; a control server (`CONTROL`) widens every judgement by its offset
(`with_server_spread`), and the split (`priced_on_race`) prices each prediction again on the
race's own prompts. docs/engines.md, "`polyplan bench peers`".
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

from polyplan.engines.llama_cpp.build import require_build
from polyplan.engines.llama_cpp.server import LlamaServer, round_widths
from polyplan.engines.llama_cpp.race_memory import (GB, MemoryNeed, ModelMemory, RaceGroups, gguf_memory, memory_line, process_need,
                                                    race_groups, resident_need, usable_memory)
from polyplan.engines.race import Contender, RaceRun, Timed, race, race_rows
from polyplan.formats.candidates import RULE_DRAFTERS
from polyplan.formats.errors import PolyplanError
from polyplan.formats.race import CONTROL, TARGET_ONLY, Race, RaceRow
POLYPLAN = "polyplan plan"
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
_DRAFT_SWEEP = ((4, 0.6), (8, 0.6), (8, 0.8))  # (--spec-draft-n-max, --spec-draft-p-min) tried for the best drafter
UNJUDGED = "not judged here (polyplan validate judges the plan)"


def server_configs(plan, export, candidates, files: dict[str, str],
                   draft_sweep: tuple[tuple[int, float], ...] = _DRAFT_SWEEP, recommended=None) -> list[Contender]:
    """The servers to race (docs/engines.md, "`polyplan bench peers`"), the best drafter also at
    each (n-max, p-min) of `draft_sweep`, with `export`'s predictions (`judged`)."""
    from polyplan.planner.llama_cpp.ranking import llama_cpp_spec_flags

    configs = [Contender(TARGET_ONLY, ()), Contender(CONTROL, ())]
    by_drafter = {option.drafter: option for option in export.options}
    drafters = []  # (name, file, predicted speedup at the export's K)
    for name, source in draft_files(candidates, files):
        option = by_drafter.get(name)
        k = option.block_size if option is not None and option.block_size else 4
        predicted = option.prediction.speedup if option is not None and option.prediction is not None else None
        drafters.append((name, source, predicted))
        configs.append(Contender(f"draft-simple {name} (defaults)", ("--spec-type", "draft-simple", "-md", source)))
        configs.append(Contender(f"draft-simple {name} K={k}", tuple(llama_cpp_spec_flags("draft_model", k, source))))
    if drafters:
        name, source, _ = max(drafters, key=lambda drafter: -1.0 if drafter[2] is None else drafter[2])
        for n_max, p_min in draft_sweep:
            configs.append(Contender(f"draft-simple {name} n-max={n_max} p-min={p_min:g}",
                                        ("--spec-type", "draft-simple", "-md", source, "--spec-draft-n-max", str(n_max),
                                         "--spec-draft-p-min", f"{p_min:g}")))
        configs.append(Contender(f"draft-simple {name} + ngram-mod (defaults)", ("--spec-type", "draft-simple,ngram-mod", "-md", source)))
    for kind in NGRAM_TYPES:
        configs.append(Contender(f"{kind} (defaults)", ("--spec-type", kind)))
    configs.append(Contender("llama.cpp default (--spec-default)", ("--spec-default",)))
    return judged(configs, export, recommended)


def draft_file(args: Sequence[str]) -> str | None:
    """The draft model's file of a server's flags (`-md`), None without one."""
    return args[args.index("-md") + 1] if "-md" in args else None


def draft_files(candidates, files: Mapping[str, str]) -> list[tuple[str, str]]:
    """(name, GGUF file) of each model drafter with a GGUF of its own or one polyplan made (`files`)."""
    drafts = []
    for candidate in candidates.candidates[1:]:
        source = files.get(candidate.name) or (candidate.source if candidate.source_kind == "gguf" else None)
        if not isinstance(candidate.derive, RULE_DRAFTERS) and source is not None:
            drafts.append((candidate.name, source))
    return drafts


def judged(configs: Sequence[Contender], export, recommended=None) -> list[Contender]:
    """`configs` with the export's prediction of each one it ranks (matched by flags; the control a
    1.00 point), the recommended one marked exported; then every ranked configuration not among
    them, so each prediction is raced."""
    from polyplan.planner.llama_cpp.ranking import OFF

    ranking = tuple(getattr(export, "ranking", ()))
    recommended = recommended if recommended is not None else getattr(export, "recommended", None)
    by_flags = {tuple(config.flags): config for config in ranking}
    out = []
    for config in configs:
        if config.label == CONTROL:  # never the exported row
            out.append(dataclasses.replace(config, predicted_speedup=1.0, predicted_interval=(1.0, 1.0), exported=False))
            continue
        ranked = by_flags.get(_ranked_flags(config)) if config.label != TARGET_ONLY else next((r for r in ranking if r.label == OFF), None)
        if ranked is not None:
            config = dataclasses.replace(config, predicted_speedup=ranked.speedup, predicted_interval=ranked.interval,
                                         exported=recommended is not None and ranked.flags == recommended.flags
                                         and config.args != ("--spec-default",))
        out.append(config)
    raced = {tuple(config.args) for config in out}
    for ranked in ranking:
        if ranked.label != OFF and tuple(ranked.flags) not in raced:
            out.append(Contender(ranked.label, tuple(ranked.flags), ranked.speedup,
                                    recommended is not None and ranked.flags == recommended.flags, ranked.interval))
    return out


def _ranked_flags(config: Contender) -> tuple[str, ...]:
    """The flags the export ranks `config` under (`--spec-default` is ngram-mod at its defaults)."""
    from polyplan.planner.llama_cpp.ngram_rules import SPEC_DEFAULT_FLAGS

    return SPEC_DEFAULT_FLAGS if config.args == ("--spec-default",) else tuple(config.args)


def race_streams(runs: Sequence[RaceRun], prompts: Sequence[Sequence[int]]) -> tuple:
    """The target alone's greedy answer to each prompt in this race (its first group and repeat),
    as target streams (`formats.profile.TargetStream`), in the prompts' order."""
    from polyplan.formats.profile import TargetStream

    answers: dict[int, tuple[int, ...]] = {}
    for run in runs:
        if run.label == TARGET_ONLY and run.group == 0:
            answers.setdefault(run.prompt, run.tokens)
    return tuple(TargetStream(len(prompt), tuple(prompt) + answers[index])
                 for index, prompt in enumerate(prompts) if index in answers and len(prompt) > 0 and answers[index])


def priced_on_race(configs: Sequence[Contender], export, drafts: frozenset[str] = frozenset()) -> list[Contender]:
    """`configs` with `race_priced`, `export`'s prediction on this race's own prompts, for each
    n-gram type and each draft model among `drafts` (the files whose agreement with the race's
    answers was measured; any other would still read the profile's)."""
    def again(ranked) -> bool:
        return ranked.drafted is not None or draft_file(ranked.flags) in drafts

    by_flags = {tuple(ranked.flags): ranked for ranked in getattr(export, "ranking", ()) if again(ranked)}
    out = []
    for config in configs:
        ranked = by_flags.get(_ranked_flags(config)) if config.label not in (TARGET_ONLY, CONTROL) else None
        out.append(config if ranked is None else dataclasses.replace(config, race_priced=ranked.speedup))
    return out


def race_agreements_of(configs: Sequence[Contender], drafts: Sequence[tuple[str, str]], target: str, threads: int,
                    streams: Sequence, log=lambda line: None) -> tuple[tuple, frozenset[str]]:
    """Each raced draft model's agreement with the race's answers, and the files measured; a file
    the bindings cannot run is left out with one line."""
    from polyplan.engines.llama_cpp.race_agreement import race_agreement

    raced = {draft_file(config.args) for config in configs}
    agreements, measured = [], set()
    for name, source in drafts:
        if source not in raced or source in measured:
            continue
        try:
            agreements.append(race_agreement(Path(source), threads, target, name, streams, log))
            measured.add(source)
        except (PolyplanError, OSError, ValueError) as error:
            log(f"{name}: its agreement with the race's answers not measured ({error}); its rows are not priced on them")
    return tuple(agreements), frozenset(measured)


def race_setup(plan_path, candidates_path, threads: int | None, repeats: int, new_tokens: int, log=lambda line: None):
    """What every llama-server race checks and reads first: the settings, the pinned build, a
    greedy plan, its threads (`threads` None: as its profile was measured), a warning where the
    plan was made on another machine, and its candidates with a GGUF target. Returns (build, plan,
    thread choice, candidates).

    Raises:
        PolyplanError: a setting below 1, no build, a sampled plan, a target that is not a GGUF.
    """
    from polyplan.formats.plan import read_plan
    from polyplan.formats.sampling import SamplingMode
    from polyplan.models.candidate_file import plan_candidates
    from polyplan.profiler.processor import plan_machine_line
    from polyplan.profiler.threads import choose_threads, plan_threads

    if repeats < 1 or new_tokens < 1 or (threads is not None and threads < 1):
        raise PolyplanError("--repeats, --new-tokens and --threads must be >= 1")
    build = require_build()
    plan = read_plan(plan_path)
    if not SamplingMode.parse(plan.sampling).greedy:
        raise PolyplanError(f"{plan_path}: sampling {plan.sampling!r}: bench peers compares greedy outputs; use a greedy plan")
    choice = choose_threads(threads, plan_threads(plan.device), recorded_by="the plan's profile")
    other = plan_machine_line(plan)  # the race compares with the plan's predictions
    if other is not None:
        log(f"warning: {other}")
    candidates = plan_candidates(plan, str(plan_path), candidates_path)  # every drafter gets a server
    if candidates.target.source_kind != "gguf":
        raise PolyplanError(f"{plan_path}: target {candidates.target.name!r} is not a GGUF file; llama-server runs only GGUF")
    return build, plan, choice, candidates


def run_llama_peers(plan_path, *, prompts_path=None, candidates_path=None, threads: int | None = None, repeats: int = 2,
                    new_tokens: int = 64, max_prompts: int | None = None, context: int = 4096,
                    log=lambda line: None, on_run=None) -> Race:
    """Race llama-server's configurations and polyplan's plan (module docstring). `threads`
    None: as the plan's profile was measured (`profiler.threads.choose_threads`); `on_run(done,
    total, label)` hears of each run of the race (`race_servers`)."""
    from polyplan.decoder.chain import generate
    from polyplan.decoder.sampling import Sampling
    from polyplan.engines.export import engine_files, export_from_files
    from polyplan.formats.cache import cache_root
    from polyplan.models.chain_candidates import ChainCandidates
    from polyplan.profiler.prompt_sets import encode_for, validation_prompt_set

    build, plan, choice, candidates = race_setup(plan_path, candidates_path, threads, repeats, new_tokens, log)
    threads, target = choice.threads, candidates.target
    from polyplan.planner.llama_cpp.ranking import ReplayWorkload

    prompts = validation_prompt_set(prompts_path, max_prompts=max_prompts)
    exported = export_from_files(plan_path, "llama.cpp", candidates_path=candidates_path, log=log)  # what `polyplan export` prints
    files = engine_files(candidates)
    raced = server_configs(plan, exported, candidates, files)
    export = export_from_files(plan_path, "llama.cpp", candidates_path=candidates_path,
                               workload=ReplayWorkload.sent(new_tokens, repeats, len(prompts.prompts)),
                               replay_also=[_ranked_flags(config) for config in raced])
    configs = judged([dataclasses.replace(config, predicted_speedup=None, predicted_interval=None, exported=False)
                      for config in raced], export, exported.recommended)
    available = usable_memory()  # before polyplan's own members load: they are estimated with the servers (`resident_need`)
    loaded = ChainCandidates.from_plan(plan, models_yaml=candidates_path, label=str(plan_path)).load()  # polyplan's own chain
    encoded = encode_for(prompts, loaded.tokenizer)
    too_long = [p for p in encoded if len(p.ids) + new_tokens > context]
    if too_long:
        raise PolyplanError(f"prompt {too_long[0].prompt.source}: {len(too_long[0].ids)} tokens + {new_tokens} new exceed the context {context}")
    chain = list(loaded.members)
    block_sizes = list(loaded.resolved.block_sizes)
    logs = cache_root() / "engines" / "logs" / time.strftime("%Y%m%d-%H%M%S")
    common = ("-t", str(threads), "-tb", str(threads), "-c", str(context), "-np", "1", "--no-webui", "--no-warmup",
              *export.server_flags)  # `--no-repack` where llama.cpp's extra buffers crash (the export decided)
    mapped = "--no-repack" in common  # weights stay in the mapped file, shared (else each server repacks its own copy)
    needs = server_needs(configs, gguf_memory(target.source), context, mapped=mapped)
    memory = race_groups(needs[0], needs[1:], resident_need(POLYPLAN, loaded.loaded, mapped=mapped), available)
    by_label = {config.label: config for config in configs}
    groups = [[by_label[label] for label in group] for group in memory.groups]
    memory_note = memory_line(memory, len(configs))
    log(memory_note)
    torch.set_num_threads(threads)
    index = {config.label: number for number, config in enumerate(configs)}

    def start(config: Contender) -> LlamaServer:
        log(f"starting llama-server: {config.label}")
        return LlamaServer(build.server, Path(target.source), (*common, *config.args), logs / f"server-{index[config.label]}.log",
                           trace=True)

    def ours(ids: Sequence[int]) -> Timed:
        began = time.perf_counter()
        result = generate(chain, list(ids), max_new_tokens=new_tokens, block_sizes=block_sizes,
                          sampling=Sampling(0.0), draft_policy=loaded.resolved.draft_policy)  # no eos: exactly new_tokens, as the servers
        level = result.levels[0]
        return Timed(tuple(result.token_ids), time.perf_counter() - began, None, level.tokens_drafted, level.tokens_accepted)

    runs, failures = race_servers(groups, start, ours, encoded, repeats=repeats, new_tokens=new_tokens, log=log, on_run=on_run)
    streams = race_streams(runs, [prompt.ids for prompt in encoded])
    if streams:  # the split: the same export priced on this race's prompts, in the order the servers got them
        agreements, measured = race_agreements_of(configs, draft_files(candidates, files), plan.target, threads,
                                               streams, log)
        on_race = export_from_files(plan_path, "llama.cpp", candidates_path=candidates_path, streams=streams, agreements=agreements,
                                    workload=ReplayWorkload.sent(new_tokens, repeats, len(streams)),
                                    replay_also=[_ranked_flags(config) for config in configs])
        configs = priced_on_race(configs, on_race, measured)
    rows = peer_rows(configs, runs, failures, memory)
    import llama_cpp

    notes = (("memory", memory_note), ("prediction", _prediction_note(export)),
             ("loop", race_loop_line(configs, runs, [prompt.ids for prompt in encoded], export.prices, draft_files(candidates, files))),
             ("pace", race_pace_line(runs, export.prices)))
    notes = tuple((name, line) for name, line in notes if line)
    about = (("llama_cpp_version", llama_cpp.__version__), ("chat_template", str(not prompts.raw)), ("logs", str(logs)))
    return Race("llama.cpp", rows, len(encoded), new_tokens, repeats, threads, choice.source, notes, about)


def _prediction_note(export) -> str:
    """One line on what the predicted column holds."""
    notes = "; ".join(getattr(export, "ranking_notes", ()))
    return ("predicted: `polyplan export --engine llama.cpp`'s decode speedup replayed for this race's new tokens and repeats"
            + (f" ({notes})" if notes else "") + "; exported: what `polyplan export` recommends for distinct requests; "
            "\"not modelled\": the export predicts no such configuration")


def race_requests(configs: Sequence[Contender], runs: Sequence[RaceRun], prompts: Sequence[Sequence[int]]) -> tuple[list, str | None]:
    """This race's requests, read as the calibration reads its own
    (`engines.llama_cpp.prices.server_request`; of the first draft model only, as the fit has one
    cost per draft pass), and that draft model's file."""
    from polyplan.engines.llama_cpp.prices import server_request
    from polyplan.engines.llama_cpp.server import Completion

    by_label = {config.label: config.args for config in configs}
    by_label[TARGET_ONLY] = ()
    drafts = [draft_file(args) for args in by_label.values() if "-md" in args]
    requests = []
    for run in runs:
        args = by_label.get(run.label)
        if args is None or run.decode_s is None or ("-md" in args and draft_file(args) != drafts[0]):
            continue
        done = Completion(run.tokens, run.decoded or len(run.tokens), 1000.0 * run.decode_s, 0.0, run.drafted, run.accepted, run.seconds,
                          run.rounds)
        request = server_request(args, prompts[run.prompt], done)
        if request is not None:
            requests.append(request)
    return requests, (drafts[0] if drafts else None)


def race_loop_line(configs: Sequence[Contender], runs: Sequence[RaceRun], prompts: Sequence[Sequence[int]], prices,
                   drafts: Sequence[tuple[str, str]] = ()) -> str:
    """llama-server's own loop fitted from this race's requests (`race_requests`) as the
    calibration's is, beside the calibration's; `drafts`: (name, GGUF file) of each draft model."""
    from polyplan.planner.exact.latency import curve_from_profile
    from polyplan.planner.llama_cpp.server_loop import DRAFT_MODEL, fit_server_loop

    if prices is None:
        return "llama-server's loop from this race: not fitted (the export was priced from the profile, without llama.cpp's T(k))"
    requests, draft = race_requests(configs, runs, prompts)
    calibrated = "not calibrated" if prices.loop is None else prices.loop.text()
    name = next((name for name, path in drafts if path == draft), None)
    draft_step = curve_from_profile(prices.reevaluations[name]) if name in prices.reevaluations else None
    if draft_step is None:
        requests = [request for request in requests if request.kind != DRAFT_MODEL]
    try:
        fitted = fit_server_loop(requests, curve_from_profile(prices.target), draft_step)
    except PolyplanError as error:
        return f"llama-server's loop from this race: not fitted ({error}); calibrated: {calibrated}"
    return (f"llama-server's loop fitted from this race's {len(requests)} requests (target alone, ngram-simple, draft-simple at a "
            f"fixed K): {fitted.text()}; calibrated: {calibrated}")


def race_pace_line(runs: Sequence[RaceRun], prices) -> str:
    """The target alone's decode step in this race against the calibration's and the step it was
    priced at: a one-token step moves with the host's memory traffic far more than a wide pass
    (docs/engines.md, the pace). "" without a timed target-alone decode or llama.cpp's prices."""
    from polyplan.planner.exact.latency import curve_from_profile

    timed = [run for run in runs if run.label == TARGET_ONLY and run.decode_s is not None and (run.decoded or 0) > 1]
    if prices is None or not timed:
        return ""
    step = sum(run.decode_s for run in timed) / sum(run.decoded - 1 for run in timed)
    per_round = 0.0 if prices.loop is None else prices.loop.per_round_s
    priced = curve_from_profile(prices.target)(1) + per_round
    calibrated = prices.calibrated_step_s
    then = "" if calibrated is None else f", {1e3 * calibrated:.1f} ms in the calibration ({step / calibrated - 1:+.1%})"
    return (f"pace: {TARGET_ONLY} decoded at {1e3 * step:.1f} ms a step in this race ({len(timed)} requests){then}, priced at "
            f"{1e3 * priced:.1f} ms (T(1) {1e3 * (priced - per_round):.1f} ms + {1e3 * per_round:.1f} ms a round): the machine ran "
            f"{step / priced - 1:+.1%} against its pricing; a ratio holds only where every server moved alike")


def server_needs(configs: Sequence[Contender], target: ModelMemory, context: int, *, mapped: bool,
                 memory: Callable[[str], ModelMemory] = gguf_memory) -> list[MemoryNeed]:
    """Each configuration's server's need: the target and its `-md` draft model (read once per
    file by `memory`) at `context` tokens."""
    drafts: dict[str, ModelMemory] = {}
    needs = []
    for config in configs:
        models = [(target, context)]
        path = draft_file(config.args)
        if path is not None:
            if path not in drafts:
                drafts[path] = memory(path)
            models.append((drafts[path], context))
        needs.append(process_need(config.label, models, mapped=mapped))
    return needs


def race_servers(groups: Sequence[Sequence[Contender]], start: Callable[[Contender], contextlib.AbstractContextManager],
                 ours: Callable[[Sequence[int]], Timed], prompts, *, repeats: int, new_tokens: int,
                 log=lambda line: None, on_run: Callable[[int, int, str], None] | None = None) -> tuple[list[RaceRun], dict[str, str]]:
    """Race each group in turn (its first configuration the target alone): start its servers
    (`start(config)`: a context manager giving a `LlamaServer`-like server), race them and
    polyplan's plan (`ours(ids)`) with `engines.race.race`, and stop them before the next group.
    `on_run(done, total, label)` hears of every run of every group (`engines.race.race`'s count,
    the groups still to race included in `total`).

    Returns every run but those of a configuration that failed, and by label why each failed.

    Raises:
        PolyplanError: the target alone fails to start or stops answering (no baseline).
    """
    runs: list[RaceRun] = []
    failures: dict[str, str] = {}
    planned = [(len(group) + 1) * len(prompts) * repeats for group in groups]  # each group's servers and polyplan's plan
    finished = ran = 0  # runs of the groups raced, and of the one racing
    for number, group in enumerate(groups):
        later = sum(planned[number + 1:])

        def counted(done: int, total: int, label: str) -> None:  # called while this group races
            nonlocal ran
            ran = done
            if on_run is not None:
                on_run(finished + done, finished + total + later, label)

        with contextlib.ExitStack() as stack:
            contenders = []
            for config in group:
                try:
                    server = stack.enter_context(start(config))
                except (PolyplanError, OSError) as error:
                    if config.label == TARGET_ONLY:
                        raise PolyplanError(f"{TARGET_ONLY} failed to start, so nothing has a baseline: {error}") from None
                    failures[config.label] = f"failed to start: {error}"
                    log(f"{config.label}: {failures[config.label]}")
                    continue
                contenders.append(dataclasses.replace(config, run=_server_run(server, new_tokens)))
            prefix = f"group {number + 1}/{len(groups)}: " if len(groups) > 1 else ""
            raced = [*contenders, Contender(POLYPLAN, run=ours)]
            done, failed = race(raced, prompts, repeats=repeats, group=number, log=lambda line: log(prefix + line), on_run=counted)
            runs += done
            failures |= failed
            finished, ran = finished + ran, 0
    return [run for run in runs if run.label not in failures], failures


def _server_run(server, new_tokens: int) -> Callable[[Sequence[int]], Timed]:
    """A started server's `run`: one request, as the server timed it."""
    def run(ids: Sequence[int]) -> Timed:
        done = server.complete(ids, new_tokens)
        return Timed(done.token_ids, done.wall_s, None, done.draft_n, done.draft_accepted, done.predicted_ms / 1000.0,
                     done.predicted_n, done.rounds)

    return run


def peer_rows(configs: list[Contender], runs: list[RaceRun], failures: Mapping[str, str], memory: RaceGroups) -> tuple[RaceRow, ...]:
    """A row per configuration, then polyplan's (`engines.race.race_rows`), with traced rounds
    and the control's offset; a configuration too large for memory says so."""
    failures = dict(failures)
    for label, needed in memory.too_large:
        failures[label] = (f"not started: needs {needed / GB:.1f} GB together with {TARGET_ONLY} and polyplan's plan, "
                           f"{memory.available / GB:.1f} GB available")
    groups = {label: number for number, group in enumerate(memory.groups, 1) for label in group[1:]}
    rows = race_rows([*configs, Contender(POLYPLAN, unjudged=UNJUDGED)], runs, failures, groups=groups)
    return with_server_spread(tuple(row if row.failure else
                                    dataclasses.replace(row, drafted_rounds=_traced_rounds([r for r in runs if r.label == row.label]))
                                    for row in rows))


def with_server_spread(rows: Sequence[RaceRow]) -> tuple[RaceRow, ...]:
    """`rows` with every judged row's `server_spread`, |control's speedup − 1|: each server process
    runs at its own speed, an offset no paired per-prompt sd shows, and the control is one draw of
    it (docs/engines.md, "The control"). Unchanged without a measured control; the control itself
    is judged by its own sd."""
    spread = _control_spread(rows)
    if spread is None:
        return tuple(rows)
    return tuple(row if row.label in (CONTROL, TARGET_ONLY, POLYPLAN) else dataclasses.replace(row, server_spread=spread)
                 for row in rows)


def _traced_rounds(runs: Sequence[RaceRun]) -> tuple[int, ...] | None:
    """How many of `runs`' rounds drafted m tokens, m = 0 … the most drafted, from the servers'
    traces (`engines.llama_cpp.server.round_widths`); None where a run was not traced or nothing
    was drafted."""
    widths = [round_widths(run.rounds, run.decoded or len(run.tokens), run.accepted) for run in runs]
    if not runs or any(each is None for each in widths) or not any(run.rounds for run in runs):
        return None
    counts = [0] * (1 + max(max(each, default=0) for each in widths))
    for each in widths:
        for m in each:
            counts[m] += 1
    return tuple(counts)


def _split_lines(rows: Sequence[RaceRow]) -> list[str]:
    """The split (`priced_on_race`): each error on the profile's prompts and on this race's."""
    split = [row for row in rows if row.race_priced is not None and row.predicted_speedup is not None
             and row.failure is None and math.isfinite(row.measured)]
    if not split:
        return []
    lines = ["", "the predictions priced on this race's own prompts (the target alone's answers here, replayed by the same rules, "
             "T(k) and server loop, in the order sent; a draft model's agreement with them measured through the bindings): "
             "what is left is the model's error, the rest is the prompt set's",
             f"{'configuration':44s} {'measured':>9s} {'on the profile prompts':>24s} {'on this race prompts':>24s}"]
    for row in split:
        profiled = f"{row.predicted_speedup:.2f}x ({100 * row.error:+.1f}%)"
        raced = f"{row.race_priced:.2f}x ({100 * row.race_priced_error:+.1f}%)"
        lines.append(f"{row.label:44s} {row.measured:8.2f}x {profiled:>24s} {raced:>24s}")
    profiled = max((row.error for row in split), key=abs)
    raced = max((row.race_priced_error for row in split), key=abs)
    lines.append(f"worst error over these {len(split)} configurations: {100 * profiled:+.1f}% priced on the profile's prompts, "
                 f"{100 * raced:+.1f}% on this race's")
    return lines


def _control_spread(rows: Sequence[RaceRow]) -> float | None:
    """How far the control row measured from 1, |speedup − 1|; None where it did not run."""
    control = next((row for row in rows if row.label == CONTROL and row.failure is None), None)
    return None if control is None or not math.isfinite(control.measured) else abs(control.measured - 1.0)


def _control_lines(rows: Sequence[RaceRow]) -> list[str]:
    """What the control row says of the race's judgements (`with_server_spread`), where it ran."""
    spread = _control_spread(rows)
    if spread is None:
        return []
    control = next(row for row in rows if row.label == CONTROL)
    return [f"control: a second server of the target alone measured {control.measured:.3f}x ± {control.decode_speedup_sd:.3f} "
            f"(sd of its {control.runs} paired runs): server processes differ by about {100 * spread:.1f}% by themselves, "
            "so a row is \"within noise\" where its measured 95% interval, widened by that much, reaches its prediction"]


def llama_peers_lines(race: Race) -> list[str]:
    """The terminal table."""
    about = dict(race.about)
    lines = [
        f"llama-server (llama-cpp-python {about.get('llama_cpp_version')}'s llama.cpp) against polyplan's plan: {race.prompts} "
        f"prompts x {race.repeats} repeats, {race.new_tokens} new tokens, greedy, {race.threads} thread(s), "
        f"{'chat template applied' if about.get('chat_template') == 'True' else 'raw prompts'}; interleaved round-robin",
        *[line for line in (race.note("memory"),) if line],
        "speedup: whole calls (prefill included) over llama.cpp target only, paired per prompt, mean ± sd; "
        "decode tok/s and decode speedup: the server's own decode timing (what a per-token prediction is held against)",
        *[line for line in (race.note("prediction"), race.note("loop"), race.note("pace")) if line],
        f"{'configuration':44s} {'tok/s':>7s} {'decode':>7s} {'speedup':>14s} {'decode speedup':>14s} {'acc/draft':>9s} "
        f"{'greedy equal':>12s}  predicted [interval] (error vs decode speedup)",
    ]
    for row in race.rows:
        if row.failure is not None:
            lines.append(f"{row.label:44s} {row.failure}; predicted {row.judgement()}")
            continue
        decode = "-" if row.decode_tokens_per_s is None else f"{row.decode_tokens_per_s:.1f}"
        accepted = "-" if row.accepted_per_drafted is None else f"{row.accepted_per_drafted:.2f}"
        decoded = "-" if row.decode_speedup is None else f"{row.decode_speedup:7.2f}x ±{row.decode_speedup_sd:4.2f}"
        lines.append(f"{row.label:44s} {row.tokens_per_s:7.1f} {decode:>7s} {row.speedup:7.2f}x ±{row.speedup_sd:4.2f} "
                     f"{decoded:>14s} {accepted:>9s} {row.equal_outputs:>5d}/{row.runs:<6d}  {row.judgement()}")
    lines += _control_lines(race.rows)
    lines += _split_lines(race.rows)
    categories = sorted({category for row in race.rows for category, _ in row.by_category})
    if len(categories) > 1:
        lines.append("\nspeedup by category:")
        lines.append(f"{'configuration':44s} " + " ".join(f"{c[:10]:>10s}" for c in categories))
        for row in (row for row in race.rows if row.failure is None):
            values = dict(row.by_category)
            lines.append(f"{row.label:44s} " + " ".join(f"{values.get(c, float('nan')):10.2f}" for c in categories))
    differences = [f"  {row.label}: {row.first_difference}" for row in race.rows if row.first_difference]
    if differences:
        lines.append("\ngreedy outputs that differ from llama.cpp target only:")
        lines += differences
    lines.append(f"\nserver logs: {about.get('logs')}")
    lines.append("vLLM: on paper only here (no GPU on this machine); see `polyplan export --engine vllm`")
    return lines
