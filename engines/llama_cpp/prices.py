"""llama.cpp's own numbers for a llama.cpp export (`planner.llama_cpp.ranking.LlamaCppPrices`).

`export_prices` measures, for the GGUF llama-server loads and every GGUF draft model: T(k) through
the bindings (`measure_latency_entry`), each draft model's last-row-only pass at every width (its
kernels change regime between widths), the target's greedy answers (llama-server's own where it is
built, `server_streams`, else the bindings'), and llama-server's own loop
from a short calibration (`calibrate_server`) on polyplan's fixed calibration prompts, with the
target's T(k) it subtracts timed in the same sitting (`ServerCalibration`), and under load the
server's per-round cost at each count of slots asked (`calibrate_slots`). Each is kept in the
polyplan cache (`prices_folder`) by file fingerprint, threads, processor, bindings and settings,
so a second export measures nothing; the calibration is not keyed by the user's prompts or the
profile, so every plan and prompt file on this machine and file reuses it. docs/engines.md, "How
a llama.cpp export is priced".
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

from polyplan.engines.llama_cpp.server import round_widths, slot_args
from polyplan.engines.llama_cpp.server_streams import server_greedy_streams
from polyplan.engines.llama_cpp.unified_steps import measure_unified_steps
from polyplan.engines.llama_cpp.wide_flips import TIE_WIDTHS, measure_near_ties
from polyplan.formats.atomic import write_text_atomically
from polyplan.formats.cache import cache_root
from polyplan.formats.codec import decode, encode
from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import ModelProfile, Profile, TargetStream
from polyplan.models.file_fingerprints import file_fingerprint
from polyplan.models.hashing import fingerprint_settings, fingerprint_tokens
from polyplan.planner.llama_cpp.ngram_rules import NGramSimpleRule, ngram_simple_flag_sizes, replay_request
from polyplan.planner.llama_cpp.server_loop import (DRAFT_MODEL, NGRAM, TARGET_ALONE, ServerRequest, fit_server_loop,
                                                    slot_round_cost)
from polyplan.planner.exact.latency import LatencyCurve, curve_from_profile
from polyplan.planner.llama_cpp.kv_cells import UnifiedSteps
from polyplan.planner.llama_cpp.near_ties import NearTies, stream_digest
from polyplan.planner.llama_cpp.ranking import LlamaCppPrices, llama_cpp_spec_flags

VERSION = 6  # of the cache's keys: raised whenever what is measured, or how, changes
PRICE_KS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # measured widths (ngram-mod drafts up to 64); the curve extends the last slope
_DRAFTER_KS = (1, 2, 4, 8)  # a draft model decodes one token a round step, and its accepted tokens in one batch
REEVAL_KS = tuple(range(1, 17))  # the server's second decode of a verified batch on the draft model (last row only)
CONTEXT = 128  # cached tokens before each timed pass (the profile's shorter context)
UNIFIED_SEQUENCES = 4  # `--kv-unified`'s price: the target's step over this many sequences (`measure_unified_steps`)
UNIFIED_CELLS = 768  # cached tokens of each: 3,328 cells read unified against 1,024 split
UNIFIED_LONG_CELLS = 1536  # and again over longer slots, where a masked cell costs more (`kv_cells.CellCost.longer`)
UNIFIED_KS = (1, 4, 16, 64)  # the step's rows, spread over the sequences: one slot's step to four slots' drafts of 15
REPEATS = 5
_STREAM_TOKENS = 128  # new tokens per stream when the profile does not say (the profile's default)
CALIBRATION_PROMPTS = "llama_cpp_calibration.json"  # polyplan/data: fixed code and prose that repeats itself
_CALIBRATION_LENGTHS = (8, 24)  # n_predict of the calibration requests
_CALIBRATION_NGRAM = (2, 8)  # ngram-simple size-n / size-m: drafts often, so its rounds vary
_CALIBRATION_K = (1, 3, 6)  # draft-simple K of the fixed-K draft-model servers: one pass (width 2), a few, many
_CALIBRATION_STOP = 0.999  # p-min of a draft-simple server at n-max 1: most rounds stop before drafting
_CALIBRATION_REPEATS = 2
_SITTING_KS = tuple(range(1, max(_CALIBRATION_NGRAM[1], *_CALIBRATION_K) + 2))  # every T(L + 1) a calibration round pays
_SITTING_DRAFT_KS = tuple(range(1, max(_CALIBRATION_K) + 2))  # a draft model's pass and every T_d(L + 1) its rounds re-decode
_SERVER_CONTEXT = 1024
_SLOT_PROMPT = 32  # tokens of each slot's prompt at several slots: distinct windows of the calibration prompts, one length
_SLOT_LENGTH = 32  # n_predict of each slot's request (end-of-sequence ignored): the slots decode in step
_SLOT_REPEATS = 3
_STOPPED = -1  # `_fit_kind`'s K of a draft model at n-max 1 behind a confidence stop


@dataclasses.dataclass(frozen=True)
class PriceSource:
    """What to measure: the GGUF llama-server loads as the target, the GGUF draft models by
    candidate name, the plan's threads, the prompts (token ids) and their new tokens, and the
    flags the server needs on this machine (`--no-repack`)."""

    target: Path
    drafters: Mapping[str, Path]
    threads: int
    prompts: tuple[tuple[int, ...], ...]
    new_tokens: int
    server_flags: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class ServerCalibration:
    """One sitting of llama-server's calibration: its requests as the server ran them, the
    target's T(k) through the bindings timed with the servers up, before the first round of
    requests and after each (`_SITTING_KS`, in that order), the streams it sent (the target's
    greedy continuation of the fixed calibration prompts), and at the same points the draft
    model's last-row T_d(k) (`_SITTING_DRAFT_KS`; none without a draft model). The fit subtracts
    these T(k), not the profile's, because a machine's pace moves between sittings and the fit
    reads that move as the server's own cost; it reads a draft model's passes against these
    T_d(k) for the same reason (`sitting_draft_loop`)."""

    requests: tuple[ServerRequest, ...]
    target_steps: tuple[ModelProfile, ...]
    streams: tuple[TargetStream, ...] = ()
    draft_steps: tuple[ModelProfile, ...] = ()

    def step(self) -> LatencyCurve:
        """The sitting's T(k) (`sitting_step`)."""
        return sitting_step(self.target_steps)

    def draft_step(self) -> LatencyCurve | None:
        """The sitting's last-row T_d(k) of its draft model (`sitting_step`); None where it timed none."""
        return sitting_step(self.draft_steps) if self.draft_steps else None


@dataclasses.dataclass(frozen=True)
class SlotCalibration:
    """One sitting of llama-server at `slots` slots (`calibrate_slots`): the target alone serving
    `slots` equal requests at once, `_SLOT_REPEATS` times, each request as (decode seconds,
    rounds), and the target's T(k) at one and at `slots` rows through the bindings, with the server
    up, before the first round and after each."""

    slots: int
    requests: tuple[tuple[float, int], ...]
    target_steps: tuple[ModelProfile, ...]

    def step(self) -> LatencyCurve:
        """The sitting's T(k) (`sitting_step`)."""
        return sitting_step(self.target_steps)


def sitting_step(entries: Sequence[ModelProfile]) -> LatencyCurve:
    """A calibration sitting's T(k): the mean of its timings (`entries`) at each width.

    Raises:
        PolyplanError: the sitting timed no T(k), or its timings are at different widths.
    """
    if not entries:
        raise PolyplanError("server calibration: no T(k) timed in its sitting")
    curves = [curve_from_profile(entry) for entry in entries]
    ks = curves[0].ks
    if any(curve.ks != ks for curve in curves):
        raise PolyplanError("server calibration: the sitting's T(k) timings are at different widths")
    return LatencyCurve(ks, tuple(sum(curve.seconds[j] for curve in curves) / len(curves) for j in range(len(ks))))


def wider(base: Sequence[int], widest: int) -> tuple[int, ...]:
    """`base`, and beyond its last width the widths up to `widest` at steps of a half and a
    third (from 64: 96, 128, 192, 256, ...), so that a curve between them is interpolated, not
    extended from its last slope."""
    extra, power = [], base[-1]
    while power < widest:
        extra += [width for width in (power * 3 // 2, power * 2) if width < widest]
        power *= 2
    return tuple(base) + tuple(extra) + ((widest,) if widest > base[-1] else ())


def price_widths(clients: Sequence[int] = (1,), k_max: int = 0) -> tuple[int, ...]:
    """The widths the target's T(k) is measured at for `clients` concurrent requests: `PRICE_KS`
    (one request), and with B requests in flight, whose drafts llama-server verifies in one
    decode, up to B times the widest (B·(k_max + 1) where that is wider; `wider`)."""
    most = max(clients, default=1)
    return wider(PRICE_KS, most * max(PRICE_KS[-1], k_max + 1)) if most > 1 else PRICE_KS


def draft_widths(clients: Sequence[int] = (1,), k_max: int = 0) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A draft model's widths for `clients` concurrent requests: its T_d(k) (with B slots drafting
    together, one row each, a draft step is B wide) and its last-row-only second decode of the
    verified batches (B·(k_max + 1) wide); `_DRAFTER_KS` and `REEVAL_KS` for one request."""
    most = max(clients, default=1)
    if most == 1:
        return _DRAFTER_KS, REEVAL_KS
    return wider(_DRAFTER_KS, most), wider(REEVAL_KS, most * (k_max + 1))


def prices_for(source: PriceSource, profile: Profile, plan_target: str, *, reuse: Collection[str] = frozenset(),
               build=None, log: Callable[[str], None] = lambda line: None,
               latency: Callable | None = None, decode_streams: Callable | None = None,
               calibrate: Callable | None = None, ks: Sequence[int] = PRICE_KS,
               draft_ks: tuple[Sequence[int], Sequence[int]] = (_DRAFTER_KS, REEVAL_KS), clients: Sequence[int] = (1,),
               calibrate_at: Callable | None = None, unified_steps: Callable | None = None,
               near_ties: Callable | None = None, server_streams: Callable | None = None) -> LlamaCppPrices:
    """llama.cpp's numbers for `source` (module docstring), from the cache when kept there.

    `ks`: the target's widths (`price_widths`), `draft_ks` a draft model's (`draft_widths`);
    the cache keys hold them. `reuse`: the models
    whose profile entry already is llama.cpp's on that file at these threads
    (their T(k), and without a build the target's streams, come from `profile`). `build` None: the
    server's loop is not calibrated and the target's streams are the bindings'; built, they are
    llama-server's own answers (`server_answers`), kept by the file, threads, build, flags and
    prompts, unless `decode_streams` is given. The calibration (`calibrate_server`) is kept by what changes it: this
    processor, the bindings, the target's and the first draft model's files, the threads, the
    build, the server's flags and its own settings and prompts, so other prompts or a re-timed
    profile reuse it; so is each count of `clients` above one, at which the server's per-round
    cost is calibrated on its own (`calibrate_slots`), and the target's step over several sequences
    split and unified is timed (`measure_unified_steps`). `latency`, `decode_streams`, `calibrate`,
    `calibrate_at`, `unified_steps`, `near_ties` and `server_streams` replace the measurements (tests). The streams'
    near-ties (`engines.llama_cpp.wide_flips`) are checked on the target's file at `TIE_WIDTHS`,
    kept by its fingerprint, the threads and the streams.

    Raises:
        PolyplanError: the bindings are missing, or a file cannot be loaded.
    """
    server_decoded = build is not None and decode_streams is None  # the server's own answers (`server_answers`)
    server_streams = server_streams or server_answers
    latency = latency or measure_latency_entry
    decode_streams = decode_streams or decode_greedy_streams
    calibrate = calibrate or calibrate_server
    calibrate_at = calibrate_at or calibrate_slots
    unified_steps = unified_steps or measure_unified_steps
    near_ties = near_ties or measure_near_ties
    notes = []
    fingerprint = file_fingerprint(source.target)
    where = f"{source.target.name}, {source.threads} thread{'s' if source.threads != 1 else ''}"
    if plan_target in reuse:
        target = profile.model(plan_target)
        runs = profile.acceptance_runs.get("greedy")
        streams = () if runs is None else runs.streams
        notes.append(f"priced from the profile: T(k) of {plan_target!r} is llama.cpp's on {where} already")
    else:
        target = _latency_entry(latency, source.target, fingerprint, source.threads, tuple(ks), log)
        key = _key("streams", fingerprint, source.threads, fingerprint_tokens(source.prompts), source.new_tokens)
        streams = () if not source.prompts or server_decoded else _cached(key, tuple[TargetStream, ...], lambda: decode_streams(
            source.target, source.threads, source.prompts, source.new_tokens, log))
        notes.append(f"priced by llama.cpp: T(k), k = 1 … {max(ks)}, measured through the bindings on {where} (cached by "
                     "the file's fingerprint)")
    answers = ()
    if server_decoded and source.prompts:
        counts = sorted(set(clients) | {1})
        answers = tuple((count, _cached(
            _key("server answers", fingerprint, source.threads, build.version, source.server_flags,
                 fingerprint_tokens(source.prompts), source.new_tokens, count),
            tuple[TargetStream, ...], lambda count=count: server_streams(build, source, count, log))) for count in counts)
        streams = dict(answers)[1]
        notes.append(f"the target's {len(streams)} greedy answers, which the n-gram rules are replayed over: llama-server's "
                     f"own on {where} at {', '.join(map(str, counts))} slot(s), each count's prompts sent that many at a "
                     "time (its kernels part from the bindings' one-token decode at some near-ties, and differently as "
                     "more slots decode together)")
    elif streams:
        notes.append(f"the target's {len(streams)} greedy streams decoded through the bindings on {where}")
    ties = None
    checked = tuple({stream_digest(stream): stream for stream in (*streams, *(s for _, more in answers for s in more))}.values())
    if checked:
        key = _key("ties", fingerprint, source.threads, TIE_WIDTHS, [stream_digest(stream) for stream in checked])
        ties = _cached(key, NearTies, lambda: near_ties(source.target, source.threads, checked, TIE_WIDTHS, log=log))
        flipped, total = ties.count()
        notes.append(f"near-ties: a pass of {' or '.join(map(str, TIE_WIDTHS))} rows gives another token than the one-token "
                     f"stream in {flipped} of {total} streams; a repeated request's remembered answer departs there")
    drafters = {}
    for name, path in source.drafters.items():
        if name in reuse:
            drafters[name] = profile.model(name)
            continue
        drafters[name] = _latency_entry(latency, path, file_fingerprint(path), source.threads, tuple(draft_ks[0]), log)
    measured = sorted(name for name in drafters if name not in reuse)
    if measured:
        notes.append(f"draft models' T_d(k) measured through the bindings at {source.threads} thread(s): {', '.join(measured)}")
    if len(measured) < len(drafters):
        notes.append("draft models' T_d(k) from the profile (llama.cpp members of their files already): "
                     + ", ".join(sorted(name for name in drafters if name in reuse)))
    loop, ratio, reevaluations, pace = None, None, {}, None
    if build is None:
        notes.append("llama-server's own loop: not calibrated (llama.cpp's server is not built; run "
                     "`polyplan engines build llama.cpp`); priced with polyplan's loop")
    else:
        for name, path in source.drafters.items():  # only llama-server re-decodes a verified batch on the draft model
            reevaluations[name] = _latency_entry(latency, path, file_fingerprint(path), source.threads, tuple(draft_ks[1]), log,
                                                 "reeval")
        if reevaluations:
            notes.append(f"draft models' second decode of a verified batch in llama-server (the last row only), k = 1 … "
                         f"{max(draft_ks[1])}, measured through the bindings at {source.threads} thread(s): {', '.join(sorted(reevaluations))}")
        drafter_files = {name: str(path) for name, path in list(source.drafters.items())[:1]}  # the first draft model
        key = _key("server", fingerprint, source.threads, build.version, source.server_flags,
                   [file_fingerprint(path) for path in drafter_files.values()], calibration_texts(),
                   _CALIBRATION_LENGTHS, _CALIBRATION_NGRAM, _CALIBRATION_K, _CALIBRATION_STOP, _CALIBRATION_REPEATS,
                   _SITTING_KS, _SITTING_DRAFT_KS, CONTEXT, REPEATS, _SERVER_CONTEXT)
        draft_step = next((curve_from_profile(reevaluations[name]) for name in drafter_files), None)
        calibration = _cached(key, ServerCalibration, lambda: calibrate(
            build, source.target, source.threads, drafter_files, source.server_flags, log))
        loop = sitting_draft_loop(calibration, draft_step, notes)
        pace = calibrated_step(calibration.requests)
        notes.append(f"llama-server's own loop, calibrated on {where}: {loop.text()}")
        first, last = (curve_from_profile(entry)(1) for entry in (calibration.target_steps[0], calibration.target_steps[-1]))
        notes.append(f"the calibration ran on polyplan's fixed prompts ({len(calibration.requests)} requests; kept for this "
                     f"processor, file, draft model, threads, build and flags, whatever the prompts or profile) and subtracts "
                     f"the target's T(k) timed in its own sitting: T(1) {1e3 * first:.2f} ms before its requests, "
                     f"{1e3 * last:.2f} ms after (the prices' T(1): {1e3 * curve_from_profile(target)(1):.2f} ms)")
        loop = _at_slots(loop, source, build, clients, calibrate_at, notes, log)
        if loop.per_draft_pass_s is not None and draft_step is not None:
            name = next(iter(drafter_files))
            ratio = loop.per_draft_pass_s / draft_step(1)
            notes.append(f"draft model {name!r} in llama-server's loop: {1e3 * loop.per_draft_pass_s:.2f} ms per pass "
                         f"against the bindings' T_d(1) {1e3 * draft_step(1):.2f} ms ({ratio - 1:+.0%}; every draft model "
                         "priced so)")
    unified = unified_long = None
    if any(count > 1 for count in clients):  # what `--kv-unified`'s one stream costs (`planner.llama_cpp.kv_cells`)
        unified, unified_long = (
            _cached(_key("unified", fingerprint, source.threads, UNIFIED_KS, UNIFIED_SEQUENCES, cells, REPEATS), UnifiedSteps,
                    lambda cells=cells: unified_steps(source.target, source.threads, UNIFIED_KS, UNIFIED_SEQUENCES, cells,
                                                      REPEATS, log))
            for cells in (UNIFIED_CELLS, UNIFIED_LONG_CELLS))
        notes.append(f"the target's step over {UNIFIED_SEQUENCES} sequences of {UNIFIED_CELLS} and of {UNIFIED_LONG_CELLS} "
                     f"cached tokens, a KV stream each against one unified stream, k = {', '.join(map(str, UNIFIED_KS))} "
                     f"rows spread over them, through the bindings on {where}: what a pass pays per cell of other slots in "
                     "its view, for `--kv-unified` under load")
    return LlamaCppPrices(target, drafters, tuple(streams), loop, tuple(notes), ratio, reevaluations, pace, unified, ties,
                          unified_long, answers)


def sitting_draft_loop(calibration: ServerCalibration, draft_step: LatencyCurve | None, notes: list[str]):
    """llama-server's loop fitted on `calibration` (`fit_server_loop`), its draft-model costs at
    the prices' pace: the draft model's passes and prefill are fitted in the sitting's seconds, so
    they are scaled by the prices' T_d(1) (`draft_step`, the last-row curve timed with the target's
    T(k)) over the sitting's, and the re-evaluation's factor is fitted on the sitting's own T_d(k)
    and applied to the prices'. A sitting that timed no T_d(k) is fitted on `draft_step` as it is.
    The machine's pace moves between sittings, and the draft model's seconds in a prediction are
    read against the target's T(k) of the prices' sitting (docs/engines.md, "How a llama.cpp export
    is priced"); a line saying how far the paces were apart goes to `notes`."""
    sitting = calibration.draft_step()
    loop = fit_server_loop(calibration.requests, calibration.step(), sitting or draft_step)
    if sitting is None or draft_step is None or loop.per_draft_pass_s is None:
        return loop
    pace = draft_step(1) / sitting(1)
    notes.append(f"the draft model's T_d(1) in the calibration's sitting: {1e3 * sitting(1):.2f} ms, in the prices': "
                 f"{1e3 * draft_step(1):.2f} ms; its passes and prefill in the server are priced at the prices' pace "
                 f"({pace - 1:+.1%})")
    return dataclasses.replace(loop, per_draft_pass_s=loop.per_draft_pass_s * pace,
                               per_draft_prompt_token_s=loop.per_draft_prompt_token_s * pace)


def _at_slots(loop, source: PriceSource, build, clients: Sequence[int], calibrate_at: Callable, notes: list[str], log):
    """`loop` with its per-round cost at each count of `clients` above one (`calibrate_slots`,
    kept by processor, file, threads, build, flags and count), and a note saying what it found."""
    fingerprint, found = file_fingerprint(source.target), []
    for slots in sorted({count for count in clients if count > 1}):
        key = _key("slots", fingerprint, source.threads, build.version, source.server_flags, slots, calibration_texts(),
                   _SLOT_PROMPT, _SLOT_LENGTH, _SLOT_REPEATS, CONTEXT, REPEATS, _SERVER_CONTEXT)
        sitting = _cached(key, SlotCalibration, lambda count=slots: calibrate_at(build, source.target, source.threads, count,
                                                                             source.server_flags, log))
        step = sitting.step()
        found.append((slots, slot_round_cost(slots, sitting.requests, step(slots), loop.per_request_s), step(slots)))
    if not found:
        return loop
    notes.append("llama-server's per-round cost with several slots decoding together, calibrated on the target alone at "
                 "-np N with N equal requests at once, less the bindings' T(N) timed in the same sitting: "
                 + ", ".join(f"{1e3 * cost:.2f} ms a slot at {slots} slots (T({slots}) {1e3 * step:.1f} ms)"
                             for slots, cost, step in found)
                 + f" (one slot: {1e3 * loop.per_round_s:.2f} ms)")
    return dataclasses.replace(loop, slot_rounds=tuple((slots, cost) for slots, cost, _ in found))


def calibrated_step(requests: Sequence[ServerRequest]) -> float | None:
    """The target alone's decode step in a calibration: its requests' decode seconds over their
    steps (each round one token; the first token, which the prefill gives, is outside the decode
    time). None without a target-alone request."""
    alone = [request for request in requests if request.kind == TARGET_ALONE and request.drafted]
    return sum(request.decode_s for request in alone) / sum(len(request.drafted) for request in alone) if alone else None


def export_prices(plan, profile: Profile, candidates, files: Mapping[str, str], server_flags: Sequence[str] = (), *,
                  log: Callable[[str], None] = lambda line: None, clients: Sequence[int] = (1,), **measure) -> LlamaCppPrices:
    """What `polyplan export --engine llama.cpp` prices `plan` with (`prices_for` at the plan's
    threads on the profile's prompts); the profile's own numbers, with one line saying why, where
    the bindings are missing. `files`: `engines.export.engine_files`; `clients`: the concurrent
    requests asked, whose widths (`price_widths`) are measured, the target's profile entry reused
    only where it holds them; `measure`: to `prices_for`."""
    from polyplan.engines.llama_cpp.build import find_build
    from polyplan.planner.engine_export import loadable
    from polyplan.profiler.threads import plan_threads

    target = candidates.by_name(plan.target)
    _, target_file, _ = loadable("llama.cpp", target, files.get(target.name))
    own = profile.model(plan.target)
    missing = bindings_missing()
    if missing is not None:
        return LlamaCppPrices(own, notes=(f"priced from the profile ({plan.target!r} as the plan ran it) and polyplan's loop: "
                                          f"{missing}",))
    recorded = plan_threads(plan.device)
    threads = recorded or 1
    runs = profile.acceptance_runs.get("greedy")
    streams = () if runs is None else runs.streams
    prompts = tuple(tuple(stream.ids[:stream.prompt_tokens]) for stream in streams)
    new_tokens = (runs.new_tokens if runs is not None and runs.new_tokens else None) or _STREAM_TOKENS
    names = set(profile.model_names())
    drafters, reuse = {}, set()
    for candidate in candidates.candidates:
        if candidate.name == target.name or candidate.name not in names:
            continue
        method, path, reason = loadable("llama.cpp", candidate, files.get(candidate.name))
        if reason is None and method == "draft_model":
            drafters[candidate.name] = Path(path)
    for candidate in [target, *(candidates.by_name(name) for name in drafters)]:
        if candidate.engine == "llama.cpp" and recorded is not None and candidate.name in names:
            reuse.add(candidate.name)
    k_max = plan.search.k_max or 8  # the export's own default (`planner.engine_export.export_plan`)
    widths = price_widths(clients, k_max)
    reuse = one_sitting(reuse, plan.target, max((point.k for point in own.latency), default=0), widths)
    source = PriceSource(Path(target_file), drafters, threads, prompts, new_tokens, tuple(server_flags))
    prices = prices_for(source, profile, plan.target, reuse=reuse, build=find_build(), log=log, ks=widths,
                        draft_ks=draft_widths(clients, k_max), clients=clients, **measure)
    if target.engine != "llama.cpp":
        what = f"{target.source_kind} {target.source}" if target.derive is None else f"derived from {target.derive.base!r}"
        line = (f"the plan's target {plan.target!r} runs on torch ({what}): llama.cpp's numbers are measured for "
                f"{target_file}, the GGUF llama-server loads")
        prices = dataclasses.replace(prices, notes=(line, *prices.notes))
    return prices


def one_sitting(reuse: Collection[str], target: str, target_widest: int, widths: Sequence[int]) -> frozenset[str]:
    """The profile entries an export's prices take as they are, of `reuse` (the llama.cpp members
    on their own files at the plan's threads). Where the target's T(k) is timed now (it is not
    among them, or its profile, timed to `target_widest`, lacks the widths under load asked,
    `widths`), none: the draft models' T_d(k) are timed with it, in one sitting. The machine's
    pace moves between sittings, and a draft-model row's speedup reads the draft model's cost
    against the target's, so the two must come from the same one (docs/engines.md, "How a
    llama.cpp export is priced")."""
    if widths and widths[-1] > PRICE_KS[-1] and target_widest < widths[-1]:
        return frozenset()  # the profile's T(k) lacks the widths under load: every model timed now
    return frozenset(reuse) if target in reuse else frozenset()


def bindings_missing() -> str | None:
    """Why llama.cpp's bindings cannot measure here (one line), None when they can."""
    from polyplan.decoder.llama_cpp import llama_cpp_module

    try:
        llama_cpp_module()
    except PolyplanError as error:
        return str(error)
    return None


# --------------------------------------------------------------------------- measurements


def measure_latency_entry(path: Path, threads: int, ks: Sequence[int], fingerprint: str, key: str,
                          log: Callable[[str], None] = lambda line: None, last_row_only: bool = False) -> ModelProfile:
    """T(k) of the GGUF at `path` through the bindings at `threads`, every row asked for, as
    the profile times a member (`profiler.forward_timing.measure_latency`), as a profile entry;
    `last_row_only`: each pass asks for its last row only (`_LastRowOnly`)."""
    from polyplan.decoder.llama_cpp import LlamaCppMember
    from polyplan.profiler.entries import model_entry
    from polyplan.profiler.forward_timing import LatencySettings, measure_latency

    rows = "the last row" if last_row_only else "every row"
    log(f"timing {path.name} through llama.cpp's bindings at {threads} thread(s), k = 1 … {max(ks)}, {rows} (once; cached)")
    settings = LatencySettings(ks=tuple(ks), context_lengths=(CONTEXT,), repeats=REPEATS, warmup=1, prefill_repeats=1,
                               noise_budget_s=0.0)
    member = LlamaCppMember(path, threads=threads, context=settings.tokens_needed + 8)
    try:
        tokens = _filler(member.vocab_size, settings.tokens_needed)
        measurement = measure_latency(_LastRowOnly(member) if last_row_only else member, tokens, settings)
    finally:
        member.close()
    return model_entry(path.stem, fingerprint, measurement, key)


class _LastRowOnly:
    """A member whose every pass asks for its last row only, as llama-server's draft model
    decodes a verified batch again; everything else is the wrapped member's."""

    def __init__(self, member) -> None:
        self._member = member

    def __getattr__(self, name: str):
        return getattr(self._member, name)

    def forward(self, new_ids, keep_last: int | None = None):
        return self._member.forward(new_ids, keep_last=1)


def server_answers(build, source: PriceSource, slots: int = 1,
                   log: Callable[[str], None] = lambda line: None) -> tuple[TargetStream, ...]:
    """The target's greedy answers to `source`'s prompts from llama-server itself at `slots` slots
    (`server_streams.server_greedy_streams`)."""
    return server_greedy_streams(build, source.target, source.threads, source.prompts, source.new_tokens,
                                 source.server_flags, log, slots=slots)


def decode_greedy_streams(path: Path, threads: int, prompts: Sequence[Sequence[int]], new_tokens: int,
                          log: Callable[[str], None] = lambda line: None) -> tuple[TargetStream, ...]:
    """The GGUF's greedy continuation of each prompt through the bindings (up to `new_tokens`,
    ending at its end-of-generation ids, as the profile's streams)."""
    from polyplan.decoder.llama_cpp import LlamaCppMember
    from polyplan.profiler.acceptance import target_continuations

    log(f"decoding {len(prompts)} greedy streams with {path.name} on llama.cpp (once; cached)")
    longest = max((len(prompt) for prompt in prompts), default=0)
    member = LlamaCppMember(path, threads=threads, context=longest + new_tokens + 8)
    try:
        continuations = target_continuations(member, prompts, new_tokens=new_tokens, temperature=0.0, seed=0)
    finally:
        member.close()
    return tuple(TargetStream(len(prompt), tuple(prompt) + tuple(continuation))
                 for prompt, continuation in zip(prompts, continuations) if len(prompt) > 0)


def calibration_texts() -> tuple[str, ...]:
    """The fixed calibration prompts that ship with polyplan (`CALIBRATION_PROMPTS`), as text."""
    from importlib.resources import files

    payload = json.loads((files("polyplan") / "data" / CALIBRATION_PROMPTS).read_text(encoding="utf-8"))
    return tuple(payload["prompts"])


def gguf_tokens(path: Path, text: str) -> tuple[int, ...]:
    """`text` in GGUF `path`'s own vocabulary: llama.cpp's tokenizer through the bindings (the
    vocabulary alone is loaded), with the start token where the file asks for one.

    Raises:
        PolyplanError: the bindings are missing, or llama.cpp cannot load the file's vocabulary.
    """
    from polyplan.decoder.llama_cpp import file_vocabulary

    with file_vocabulary(path) as (llama_cpp, vocab):
        data = text.encode("utf-8")
        room = len(data) + 8  # a token covers at least one byte; the start and end tokens besides
        tokens = (llama_cpp.llama_token * room)()
        count = int(llama_cpp.llama_tokenize(vocab, data, len(data), tokens, room, True, False))
        if count < 0:
            raise PolyplanError(f"llama.cpp could not tokenize polyplan's calibration text with {path.name}")
        return tuple(int(token) for token in tokens[:count])


def calibration_streams(target: Path, threads: int, log: Callable[[str], None] = lambda line: None,
                        decode_streams: Callable | None = None) -> tuple[TargetStream, ...]:
    """The target's greedy continuation, through the bindings, of the fixed calibration prompts
    in its own vocabulary (as long as the longest calibration request)."""
    prompts = [gguf_tokens(target, text) for text in calibration_texts()]
    return tuple((decode_streams or decode_greedy_streams)(target, threads, prompts, max(_CALIBRATION_LENGTHS), log))


def calibrate_server(build, target: Path, threads: int, drafters: Mapping[str, str], server_flags: Sequence[str],
                     log: Callable[[str], None] = lambda line: None, *, server_factory=None,
                     streams: Sequence[TargetStream] | None = None, latency: Callable | None = None) -> ServerCalibration:
    """A few short greedy requests against the pinned llama-server on `target`, each as the
    server ran it: the target alone, ngram-simple, the first draft model at each K of
    `_CALIBRATION_K` and behind a confidence stop at n-max 1; and the target's T(k) and the first
    draft model's last-row T_d(k) through the bindings in the same sitting, with every server up:
    before the first round of requests and after each (`ServerCalibration`). Every server starts
    first and requests go round in rotated order, so a load that comes and goes falls on all alike.
    `streams` None: the fixed calibration prompts' (`calibration_streams`); `server_factory(args,
    log_path)` replaces `LlamaServer` and `latency` `measure_latency_entry` (tests)."""
    import time

    from polyplan.engines.llama_cpp.server import LlamaServer

    streams = calibration_streams(target, threads, log) if streams is None else tuple(streams)
    latency = latency or measure_latency_entry
    fingerprint = file_fingerprint(target)
    drafter = next((Path(path) for path in drafters.values()), None)
    drafter_fingerprint = None if drafter is None else file_fingerprint(drafter)
    draft_steps = []

    def timed(when: str) -> ModelProfile:
        if drafter is not None:
            draft_steps.append(latency(drafter, threads, _SITTING_DRAFT_KS, drafter_fingerprint,
                                       f"llama-server calibration sitting, draft model, {when}", log, last_row_only=True))
        return latency(target, threads, _SITTING_KS, fingerprint, f"llama-server calibration sitting, {when}", log)

    logs = cache_root() / "engines" / "logs" / ("calibration-" + time.strftime("%Y%m%d-%H%M%S"))
    common = ("-t", str(threads), "-tb", str(threads), "-c", str(_SERVER_CONTEXT), "-np", "1", "--no-webui", *server_flags)
    if server_factory is None:
        def server_factory(args, log_path):
            return LlamaServer(build.server, target, args, log_path, trace=True)
    size_n, size_m = _CALIBRATION_NGRAM
    configs = [(TARGET_ALONE, (), None), (NGRAM, tuple(llama_cpp_spec_flags("ngram", size_m, ngram_sizes=(size_n, size_n))), None)]
    for path in list(drafters.values())[:1]:
        for k in _CALIBRATION_K:  # rendered as an export renders them, so `_fit_kind` reads both alike
            configs.append((DRAFT_MODEL, tuple(llama_cpp_spec_flags("draft_model", k, path)), k))
        configs.append((DRAFT_MODEL, tuple(llama_cpp_spec_flags("draft_model", 1, path, p_min=_CALIBRATION_STOP)), 1))
    prompts = [list(stream.ids[:stream.prompt_tokens]) for stream in streams]
    requests, steps = [], []
    log(f"calibrating llama-server's own loop: {len(configs)} servers x {len(prompts)} prompts x {len(_CALIBRATION_LENGTHS)} "
        f"lengths x {_CALIBRATION_REPEATS} repeats, interleaved, and the target's T(k) between the rounds (once per "
        "machine, file and threads; cached)")
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(server_factory((*common, *flags), logs / f"server-{number}.log"))
                   for number, (_, flags, _) in enumerate(configs)]
        for server in servers:
            server.complete(prompts[0], _CALIBRATION_LENGTHS[0])  # untimed: the first request pays allocations
        turn = 0
        steps.append(timed("before its requests"))
        for repeat in range(_CALIBRATION_REPEATS):
            for prompt in prompts:
                for length in _CALIBRATION_LENGTHS:
                    order = list(range(len(configs)))
                    turn += 1
                    for number in order[turn % len(order):] + order[:turn % len(order)]:  # rotated: load drifts fall on all
                        done = servers[number].complete(prompt, length)
                        request = server_request(configs[number][1], prompt, done)
                        if request is not None:
                            requests.append(request)
            steps.append(timed(f"after round {repeat + 1}"))
    return ServerCalibration(tuple(requests), tuple(steps), streams, tuple(draft_steps))


def slot_prompts(target: Path, slots: int) -> tuple[tuple[int, ...], ...]:
    """`slots` distinct prompts of `_SLOT_PROMPT` tokens in the target's own vocabulary: windows
    of the fixed calibration prompts, taken in turn (again from the first where there are more
    slots than windows).

    Raises:
        PolyplanError: the calibration prompts are shorter than one window in this vocabulary.
    """
    windows = [tokens[start:start + _SLOT_PROMPT] for tokens in (gguf_tokens(target, text) for text in calibration_texts())
               for start in range(0, len(tokens) - _SLOT_PROMPT + 1, _SLOT_PROMPT)]
    if not windows:
        raise PolyplanError(f"server calibration: polyplan's calibration prompts are under {_SLOT_PROMPT} tokens in {target.name}'s vocabulary")
    return tuple(windows[index % len(windows)] for index in range(slots))


def calibrate_slots(build, target: Path, threads: int, slots: int, server_flags: Sequence[str],
                    log: Callable[[str], None] = lambda line: None, *, server_factory=None,
                    prompts: Sequence[Sequence[int]] | None = None, latency: Callable | None = None) -> SlotCalibration:
    """llama-server at `-np slots` on `target` serving `slots` equal greedy requests of the target
    alone at once (`_SLOT_LENGTH` tokens, end-of-sequence ignored, so the slots decode in step),
    `_SLOT_REPEATS` times after an untimed round, and the target's T(1) and T(slots) through the
    bindings in the same sitting, before the first timed round and after each
    (`SlotCalibration`). `prompts` None: `slot_prompts`; `server_factory(args, log_path)` replaces
    `LlamaServer` and `latency` `measure_latency_entry` (tests)."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from polyplan.engines.llama_cpp.server import LlamaServer

    prompts = slot_prompts(target, slots) if prompts is None else tuple(tuple(prompt) for prompt in prompts)
    latency = latency or measure_latency_entry
    fingerprint = file_fingerprint(target)

    def timed(when: str) -> ModelProfile:
        return latency(target, threads, (1, slots), fingerprint, f"llama-server at {slots} slots, {when}", log)

    logs = cache_root() / "engines" / "logs" / (f"slots-{slots}-" + time.strftime("%Y%m%d-%H%M%S"))
    args = ("-t", str(threads), "-tb", str(threads), *slot_args(slots, _SERVER_CONTEXT), "--no-webui", *server_flags)
    if server_factory is None:
        def server_factory(args, log_path):
            return LlamaServer(build.server, target, args, log_path)
    log(f"calibrating llama-server at {slots} slots: {slots} requests at once x {_SLOT_REPEATS} rounds of the target alone, "
        "and the target's T(k) between the rounds (once per machine, file, threads and count; cached)")
    requests, steps = [], []
    with server_factory(args, logs / "server.log") as server, ThreadPoolExecutor(max_workers=slots) as pool:
        def round_of(length: int):
            return list(pool.map(lambda prompt: server.complete(prompt, length), prompts))

        round_of(4)  # untimed: every slot's first request pays its allocations
        steps.append(timed("before its requests"))
        for repeat in range(_SLOT_REPEATS):
            requests += [(done.predicted_ms / 1000.0, done.predicted_n - 1) for done in round_of(_SLOT_LENGTH)]
            steps.append(timed(f"after round {repeat + 1}"))
    return SlotCalibration(slots, tuple(requests), tuple(steps))


def server_request(args: Sequence[str], prompt: Sequence[int], done) -> ServerRequest | None:
    """One finished request (`engines.llama_cpp.server.Completion`) of a server started with `args`
    as the loop's fit reads it, for the calibration and the race alike; None where its rounds are
    not known (`_fit_kind`, `_rounds`)."""
    kind, k, sizes = _fit_kind(tuple(args))
    if kind is None:
        return None
    drafted = _rounds(kind, prompt, done, k, sizes)
    if drafted is None:
        return None
    passes = (1,) * len(drafted) if kind == DRAFT_MODEL and k == _STOPPED else None
    return ServerRequest(kind, drafted, done.predicted_ms / 1000.0, len(prompt), passes)


def _fit_kind(args: tuple[str, ...]) -> tuple[str | None, int | None, tuple[int, int] | None]:
    """(kind, K of a fixed-K draft model or `_STOPPED`, ngram-simple's sizes) of a server's flags;
    kind None: not one the fit can read (a stateful n-gram type, a draft whose length varies). A
    draft model is read at a fixed K only where n-max K, n-min 0 and p-min 0 are all given (with
    n-min > 0 the server discards drafts the trace does not count), and as `_STOPPED` at n-max 1,
    n-min 0 and a p-min above 0 (each round one pass, drafting its token or stopping)."""
    from polyplan.planner.llama_cpp.policy import draft_simple_flags

    if "--spec-type" not in args and "--spec-default" not in args and "-md" not in args:
        return TARGET_ALONE, None, None
    sizes = ngram_simple_flag_sizes(args)
    if sizes is not None:
        return NGRAM, None, sizes
    draft = draft_simple_flags(args)
    explicit = {"--spec-draft-n-max", "--spec-draft-n-min", "--spec-draft-p-min"} <= set(args)
    if draft is not None and explicit and draft.n_min == 0 and draft.p_min == 0.0:
        return DRAFT_MODEL, draft.n_max, None
    if draft is not None and explicit and draft.n_max == 1 and draft.n_min == 0 and draft.p_min > 0.0:
        return DRAFT_MODEL, _STOPPED, None
    return None, None, None


def _rounds(kind: str, prompt: Sequence[int], done, k: int | None, sizes: tuple[int, int] | None = None) -> tuple[int, ...] | None:
    """The tokens each round of a finished request drafted (None: not known): ngram-simple's
    replayed on the server's own output (None where its totals differ from the server's); behind
    `_STOPPED`, one token in as many rounds as it drafted (the fit reads only totals); a fixed K
    its traced rounds, else K a round while its drafted tokens last."""
    generated = done.predicted_n
    if generated < 2:
        return None
    if kind == TARGET_ALONE:
        return (0,) * (generated - 1)
    rounds = generated - 1 - done.draft_accepted
    if kind == NGRAM:
        stream = TargetStream(len(prompt), tuple(prompt) + tuple(done.token_ids))
        replayed = replay_request(NGramSimpleRule(*(sizes or _CALIBRATION_NGRAM)), stream, generated)
        if (sum(r.drafted for r in replayed), sum(r.accepted for r in replayed)) != (done.draft_n, done.draft_accepted):
            return None
        return tuple(r.drafted for r in replayed)
    if k == _STOPPED:
        return (1,) * done.draft_n + (0,) * (rounds - done.draft_n) if 0 <= done.draft_n <= rounds else None
    if done.rounds is not None:
        return round_widths(done.rounds, generated, done.draft_accepted)
    widths, left = [], done.draft_n
    for _ in range(rounds):
        widths.append(min(k, left))
        left -= widths[-1]
    return tuple(widths) if left == 0 else None


def _filler(vocab: int, length: int) -> list[int]:
    """`length` token ids spread over the vocabulary (timing does not depend on which)."""
    return [(17 + 7919 * i) % max(vocab - 1, 1) + 1 for i in range(length)]


# --------------------------------------------------------------------------- the cache


def prices_folder() -> Path:
    """Where the measurements are kept (`formats.cache`)."""
    return cache_root() / "engines" / "prices"


def _key(*parts) -> str:
    from polyplan.decoder.llama_cpp import llama_cpp_module
    from polyplan.profiler.processor import this_processor

    processor = dataclasses.asdict(this_processor())
    return fingerprint_settings("llama-cpp-prices", VERSION, llama_cpp_module().__version__, processor, *parts)


def _path(key: str) -> Path:
    return prices_folder() / f"{key.split(':', 1)[-1][:24]}.json"


def _latency_entry(latency: Callable, path: Path, fingerprint: str, threads: int, ks: Sequence[int], log,
                   kind: str = "latency") -> ModelProfile:
    """`latency`'s entry for the GGUF at `path` over `ks`, every row asked for (`kind` "reeval":
    the last row only), from the cache when kept there."""
    options = _ENTRY_OPTIONS.get(kind, {})
    key = _key(kind, fingerprint, threads, ks, CONTEXT, REPEATS)
    return _cached(key, ModelProfile, lambda: latency(path, threads, ks, fingerprint, key, log, **options))


# what `measure_latency_entry` is asked for each kind of entry besides the plain one
_ENTRY_OPTIONS = {"reeval": {"last_row_only": True}}


def _cached(key: str, kind, measure: Callable[[], object]):
    """The value kept under `key`, else `measure()`'s, kept."""
    kept = _kept(key, kind)
    return _keep(key, measure()) if kept is None else kept


def _kept(key: str, kind):
    """The value kept under `key`, decoded as `kind`; None when absent or unreadable."""
    try:
        payload = json.loads(_path(key).read_text(encoding="utf-8"))
        if payload.get("key") != key:
            return None
        return decode(kind, payload["value"], str(_path(key)))
    except (OSError, ValueError, KeyError, TypeError, PolyplanError):
        return None


def _keep(key: str, value):
    """Keep `value` under `key` (a cache that cannot be written costs a measurement next time)."""
    path = _path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(path, json.dumps({"key": key, "value": encode(value)}, sort_keys=True))
    except (OSError, PolyplanError):
        pass
    return value
