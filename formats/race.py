"""A race's file: one row per contender, its judgement, and the JSON `polyplan bench peers --json` prints.

The row's judgement is here, beside the row, so that the results page (`validation.race_results`)
shows what the race printed; older files read through one converter (`upgraded`).
docs/engines.md, "The race harness".
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from polyplan.formats.errors import PolyplanError

FORMAT = "polyplan race"
TARGET_ONLY = "llama.cpp target only"  # the race's baseline row: llama-server with no speculation
CONTROL = "llama.cpp target only (control)"  # a second server of the target alone: how far two identical servers differ
VERSION = 2
_NAN = float("nan")


@dataclass(frozen=True)
class RaceRow:
    """One contender's results over its runs (of one category, or "all") against the baseline's,
    and what was predicted. A row without runs has NaN numbers and says why (`failure`)."""

    label: str
    speedup: float = _NAN
    speedup_sd: float = 0.0  # over paired runs, or over repeats (HF's Spec-Bench speedup)
    runs: int = 0
    tokens: int = 0
    tokens_per_s: float = _NAN
    target_passes: int | None = None  # forward passes of the target, where counted
    decode_tokens_per_s: float | None = None  # the engine's own decode-only median
    decode_speedup: float | None = None  # mean of paired decode-only ratios (no prefill)
    decode_speedup_sd: float = 0.0
    accepted_per_drafted: float | None = None
    equal_outputs: int = 0  # runs whose greedy output equals the baseline's
    first_difference: str | None = None
    category: str = "all"
    by_category: tuple[tuple[str, float], ...] = ()  # (category, speedup)
    predicted_speedup: float | None = None
    predicted_interval: tuple[float, float] | None = None
    predicted_call_speedup: float | None = None
    predicted_tokens_per_pass: float | None = None
    race_priced: float | None = None
    exported: bool = False  # what `polyplan export` recommends
    tolerance: float | None = None  # a relative error it promised to stay within
    unjudged: str | None = None  # why a row without a prediction is not judged ("not modelled" when None)
    server_spread: float = 0.0  # the race's control offset, widening the judgement
    group: int | None = None  # its memory group (1, 2, ...); None: raced in every group, or never
    failure: str | None = None
    drafted_rounds: tuple[int, ...] | None = None  # its rounds by tokens drafted (index m), where traced

    @property
    def tokens_per_target_pass(self) -> float:
        return self.tokens / self.target_passes if self.target_passes else _NAN

    @property
    def measured(self) -> float:
        """What a prediction is held against: the decode-only speedup, else whole calls."""
        return self.decode_speedup if self.decode_speedup is not None else self.speedup

    @property
    def measured_sd(self) -> float:
        return self.decode_speedup_sd if self.decode_speedup is not None else self.speedup_sd

    @property
    def predicted(self) -> float | None:
        """The prediction a row is judged by: whole calls where modelled, else per decoded token
        (held against the decode-only speedup where the engine timed one: a whole call adds the
        same prefill to both sides)."""
        return self.predicted_call_speedup if self.predicted_call_speedup is not None else self.predicted_speedup

    @property
    def error(self) -> float | None:
        """Predicted / measured − 1; None without a prediction."""
        if self.predicted is None:
            return None
        return self.predicted / self.measured - 1.0 if math.isfinite(self.measured) and self.measured > 0 else _NAN

    @property
    def race_priced_error(self) -> float | None:
        return None if self.race_priced is None else self.race_priced / self.measured - 1.0

    @property
    def measured_ci(self) -> tuple[float, float]:
        """A normal 95% interval of the measured mean speedup (its sd over sqrt(runs))."""
        half = 1.96 * self.measured_sd / math.sqrt(max(self.runs, 1))
        return self.measured - half, self.measured + half

    @property
    def verdict(self) -> str | None:
        """"inside" its predicted interval; "within noise": not, but `measured_ci` widened by
        `server_spread` reaches it; "outside": neither. Without an interval, within or outside
        `tolerance`; None when neither applies (docs/engines.md, "The judgement")."""
        if self.predicted is None or not math.isfinite(self.measured):
            return None
        if self.predicted_interval is not None:
            low, high = self.predicted_interval
            below, above = self.measured_ci
            below, above = below - self.server_spread, above + self.server_spread
            return "inside" if low <= self.measured <= high else "within noise" if below <= high and low <= above else "outside"
        if self.tolerance is not None:
            return f"{'within' if abs(self.error) <= self.tolerance else 'outside'} {self.tolerance:.0%}"
        return None

    def judgement(self) -> str:
        """The predicted column: the prediction [interval] (error, verdict, exported); `unjudged`
        or "not modelled" for a row without one, so none is silently unjudged."""
        if self.predicted is None:
            return self.unjudged or "not modelled"
        words = [f"{100 * self.error:+.1f}%" if math.isfinite(self.measured) else "not measured"]
        words += [word for word in (self.verdict, "exported" if self.exported else None) if word]
        return f"{self.prediction_text()} ({', '.join(words)})"

    def prediction_text(self) -> str:
        """The prediction, and its interval where there is one, as the race prints them."""
        low_high = self.predicted_interval
        return f"{self.predicted:.2f}x" + ("" if low_high is None else f" [{low_high[0]:.2f}, {low_high[1]:.2f}]")


@dataclass(frozen=True)
class Race:
    """A whole race: its rows, its setting, and the lines it printed about itself."""

    engine: str  # "hf" or "llama.cpp"
    rows: tuple[RaceRow, ...]
    prompts: int
    new_tokens: int
    repeats: int
    threads: int
    threads_source: str = ""  # why this many threads (`profiler.threads.ThreadChoice.source`)
    notes: tuple[tuple[str, str], ...] = ()  # (name, line): what the race says of its predictions, memory, pace ...
    about: tuple[tuple[str, str], ...] = ()  # (name, value): the engine's version, its logs ...

    def note(self, name: str) -> str:
        return dict(self.notes).get(name, "")


def race_json(race: Race) -> dict:
    """The JSON object of `polyplan bench peers --json` (`FORMAT`, `VERSION`)."""
    fields = {field.name: getattr(race, field.name) for field in dataclasses.fields(race)}
    return {"format": FORMAT, "version": VERSION, **fields, "notes": dict(race.notes), "about": dict(race.about),
            "rows": [dataclasses.asdict(row) | {"error": row.error, "judgement": row.judgement()} for row in race.rows]}


def upgraded(payload: dict) -> dict:
    """A race file of any version as the current one: version 1 of llama-server's race (its rows
    already this row's fields, its notes at the top level) and the HF race's JSON before it
    (`configuration` rows per category, the exported verdict apart)."""
    if payload.get("format") == FORMAT:
        if payload.get("version") != VERSION:
            raise PolyplanError(f"race file version {payload.get('version')!r}: this polyplan reads up to {VERSION}")
        return payload
    rows = payload["rows"]
    if any("configuration" in row for row in rows):  # HF's race before version 2
        exported = (payload.get("exported") or {}).get("configuration")
        rows = [{"label": row["configuration"], "category": row["category"], "speedup": row["speedup"],
                 "speedup_sd": row.get("speedup_sd") or 0.0, "tokens": row["tokens"], "target_passes": row["target_passes"],
                 "tokens_per_s": row["tokens_per_second"], "predicted_speedup": row["predicted_speedup"],
                 "predicted_call_speedup": row.get("predicted_whole_call_speedup"), "exported": row["configuration"] == exported,
                 "tolerance": (payload.get("exported") or {}).get("tolerance") if row["configuration"] == exported else None}
                for row in rows]
        notes = {"hf_overhead": payload.get("hf_overhead"), "whole_call": payload.get("whole_call_note")}
        engine, about = "hf", {}
    else:  # llama-server's version 1: a row without a prediction keeps the words it printed
        rows = [row | {"unjudged": row.get("judgement")} if row.get("predicted_speedup") is None else row for row in rows]
        notes = {name: payload.get(f"{name}_note") for name in ("prediction", "loop", "pace")} | {"memory": payload.get("memory")}
        engine = "llama.cpp"
        about = {key: str(payload[key]) for key in ("logs", "llama_cpp_version", "chat_template") if key in payload}
    return {"format": FORMAT, "version": VERSION, "engine": engine, "rows": rows, "prompts": payload.get("prompts", 0),
            "new_tokens": payload.get("new_tokens", 0), "repeats": payload.get("repeats", 0), "threads": payload.get("threads", 0),
            "threads_source": payload.get("threads_source", ""), "notes": {k: v for k, v in notes.items() if v}, "about": about}


def read_race_file(path: Path) -> Race:
    """The race in `path`, written by any version (`upgraded`).

    Raises:
        PolyplanError: the file cannot be read or is not a race's JSON.
    """
    try:
        payload = upgraded(json.loads(path.read_text(encoding="utf-8")))
        names = {field.name for field in dataclasses.fields(RaceRow)}
        rows = tuple(RaceRow(**{key: _tuples(value) for key, value in row.items() if key in names}) for row in payload["rows"])
        return Race(payload["engine"], rows, payload["prompts"], payload["new_tokens"], payload["repeats"], payload["threads"],
                    payload["threads_source"], tuple(payload["notes"].items()), tuple(payload["about"].items()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise PolyplanError(f"{path}: not the JSON `polyplan bench peers --json` prints ({error})") from None


def _spans(value) -> tuple[RequestSpan, ...]:
    """A row's `timeline` as JSON holds it (a list of objects) as its spans."""
    return tuple(RequestSpan(**span) for span in value)


def _tuples(value):
    """JSON's lists as the row's tuples."""
    return tuple(_tuples(item) for item in value) if isinstance(value, list) else value


LOAD_FORMAT = "polyplan load race"
LOAD_VERSION = 1


def union_seconds(intervals: Sequence[tuple[float, float]]) -> float:
    """The length of the union of `intervals` ((start, end) each) on one clock."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


@dataclass(frozen=True)
class RequestSpan:
    """One request of a race under load, on its run's clock (seconds since the run began): when its
    client sent it, when the server's decode of it began (its end less the server's own decode
    time), when its answer ended; the tokens it decoded, drafted and had accepted. A row's spans
    show how its requests overlapped and where its load's tail fell, which the aggregate alone hides."""

    repeat: int
    client: int
    prompt: int
    start_s: float
    decode_start_s: float
    end_s: float
    decoded: int
    drafted: int = 0
    accepted: int = 0


@dataclass(frozen=True)
class LoadRow:
    """One configuration at one number of concurrent clients (`bench peers --clients`): its
    measures, each a mean over the race's repeats with its sd over them, and what was predicted.
    The speedup is its aggregate decode throughput over the target alone's at the same clients;
    it is judged as a `RaceRow` is (`judged`). A row without runs says why (`failure`)."""

    label: str
    clients: int
    tokens_per_s: float = _NAN  # aggregate decode throughput: decoded tokens / the union of the decode intervals
    tokens_per_s_sd: float = 0.0
    request_tokens_per_s: float = _NAN  # mean over requests of decoded / decode seconds
    request_tokens_per_s_sd: float = 0.0
    first_token_s: float = _NAN  # time to first token, mean over requests, seen from the client
    first_token_s_sd: float = 0.0
    speedup: float = _NAN  # aggregate over the target alone's at the same clients and repeat, mean over repeats
    speedup_sd: float = 0.0
    request_speedup: float | None = None  # mean of the paired per-request decode ratios (today's decode speedup)
    request_speedup_sd: float = 0.0
    repeats: int = 0  # load runs measured
    requests: int = 0
    decoded: int = 0
    accepted_per_drafted: float | None = None
    equal_outputs: int = 0  # requests whose greedy output equals the target alone's
    predicted_speedup: float | None = None
    predicted_interval: tuple[float, float] | None = None
    predicted_tokens_per_s: float | None = None
    predicted_request_tokens_per_s: float | None = None
    predicted_overlap: float | None = None  # requests decoding at once in the simulation (None: not simulated)
    race_priced: float | None = None  # the same prediction priced on this race's own answers (the split)
    chosen: bool = False  # the plan's choice at these clients
    server_spread: float = 0.0  # the control's offset at these clients
    unjudged: str | None = None
    group: int | None = None
    failure: str | None = None
    timeline: tuple[RequestSpan, ...] = ()  # every request of every repeat, in the order they ended

    def judged(self) -> RaceRow:
        """This row as a `RaceRow` whose measured speedup is the aggregate one, over its repeats:
        the same judgement as the race at one request (`RaceRow.verdict`)."""
        return RaceRow(self.label, speedup=self.speedup, speedup_sd=self.speedup_sd, runs=self.repeats, tokens=self.decoded,
                       predicted_speedup=self.predicted_speedup, predicted_interval=self.predicted_interval,
                       exported=self.chosen, unjudged=self.unjudged, server_spread=self.server_spread, failure=self.failure)

    @property
    def verdict(self) -> str | None:
        return self.judged().verdict

    @property
    def error(self) -> float | None:
        return self.judged().error

    def judgement(self) -> str:
        return self.judged().judgement().replace("exported", "the plan's choice")

    @property
    def overlap(self) -> float | None:
        """Requests decoding at once, measured: per repeat, the requests' decode seconds over the
        union of their decode intervals (`timeline`), the mean over repeats; None without a timeline.
        Beside `predicted_overlap` it says whether an aggregate's error is the requests' own speed
        or how they overlapped."""
        values = []
        for repeat in sorted({span.repeat for span in self.timeline}):
            intervals = [(span.decode_start_s, span.end_s) for span in self.timeline
                         if span.repeat == repeat and span.end_s > span.decode_start_s]
            union = union_seconds(intervals)
            if union > 0:
                values.append(sum(ended - began for began, ended in intervals) / union)
        return sum(values) / len(values) if values else None

    @property
    def race_priced_error(self) -> float | None:
        """The split's error: the prediction priced on this race's answers over the measured speedup, less 1."""
        if self.race_priced is None or not math.isfinite(self.speedup) or self.speedup <= 0:
            return None
        return self.race_priced / self.speedup - 1.0


@dataclass(frozen=True)
class LoadLevel:
    """What one number of clients says: the fastest configuration measured, the plan's choice and
    whether it was the fastest ("fastest"), tied with it ("tied": their measured 95% intervals,
    the gap between them widened by the control's offset, overlap) or "slower"; the physical
    limit there (a free, perfect drafter) and llama-server's own default's row."""

    clients: int
    fastest: str | None
    chosen: str | None
    choice: str | None  # "fastest", "tied", "slower"; None without a choice or a measurement
    limit: float | None = None
    spec_default: str | None = None  # the label of llama-server's `--spec-default` row
    note: str = ""


@dataclass(frozen=True)
class LoadRace:
    """A race under load: a row per configuration and clients, a level per clients."""

    engine: str
    clients: tuple[int, ...]
    rows: tuple[LoadRow, ...]
    levels: tuple[LoadLevel, ...]
    prompts: int
    new_tokens: int
    repeats: int
    threads: int
    slot_context: int  # tokens of context per slot (llama-server's -c is this times the clients)
    threads_source: str = ""
    notes: tuple[tuple[str, str], ...] = ()
    about: tuple[tuple[str, str], ...] = ()

    def note(self, name: str) -> str:
        return dict(self.notes).get(name, "")

    def at(self, clients: int) -> tuple[LoadRow, ...]:
        return tuple(row for row in self.rows if row.clients == clients)


@dataclass(frozen=True)
class LoadSplit:
    """The split of a race under load: its rows priced on the race's own answers as well as on the
    profile's prompts, and the mean absolute error of each over them."""

    rows: tuple[LoadRow, ...]
    profiled: float  # mean |error| priced on the profile's prompts
    answered: float  # mean |error| priced on the race's answers


def control_spread(rows: Sequence[LoadRow]) -> float | None:
    """|the control's speedup − 1| among `rows` (one count of clients), None where it did not run:
    how far two identical servers differ by themselves, which widens every judgement there."""
    control = next((row for row in rows if row.label == CONTROL and row.failure is None), None)
    return None if control is None or not math.isfinite(control.speedup) else abs(control.speedup - 1.0)


def not_slower(row: LoadRow, other: LoadRow, spread: float) -> bool:
    """`row` is not slower than `other` beyond their measured 95% intervals, the gap between them
    widened by `spread` (the control's offset): the tie rule of a race under load (`LoadLevel`)."""
    _, high = row.judged().measured_ci
    low, _ = other.judged().measured_ci
    return low <= high + spread


def load_split(rows: Sequence[LoadRow]) -> LoadSplit | None:
    """The split of `rows` (`LoadSplit`); None where no row has both errors."""
    split = tuple(row for row in rows if row.race_priced_error is not None and row.error is not None)
    if not split:
        return None
    return LoadSplit(split, sum(abs(row.error) for row in split) / len(split),
                     sum(abs(row.race_priced_error) for row in split) / len(split))


def load_race_json(race: LoadRace) -> dict:
    """The JSON object of `polyplan bench peers --clients ... --json` (`LOAD_FORMAT`, `LOAD_VERSION`)."""
    fields = {field.name: getattr(race, field.name) for field in dataclasses.fields(race)}
    return {"format": LOAD_FORMAT, "version": LOAD_VERSION, **fields, "notes": dict(race.notes), "about": dict(race.about),
            "rows": [dataclasses.asdict(row) | {"verdict": row.verdict, "error": row.error, "judgement": row.judgement()}
                     for row in race.rows],
            "levels": [dataclasses.asdict(level) for level in race.levels]}


def read_load_race_file(path: Path) -> LoadRace:
    """The race under load in `path`, as `load_race_json` wrote it.

    Raises:
        PolyplanError: the file cannot be read or is not a race under load's JSON.
    """
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
        if payload.get("format") != LOAD_FORMAT or payload.get("version") != LOAD_VERSION:
            raise ValueError(f"format {payload.get('format')!r} version {payload.get('version')!r}")
        row_names = {field.name for field in dataclasses.fields(LoadRow)}
        level_names = {field.name for field in dataclasses.fields(LoadLevel)}
        rows = tuple(LoadRow(**{key: _spans(value) if key == "timeline" else _tuples(value) for key, value in row.items()
                                if key in row_names}) for row in payload["rows"])
        levels = tuple(LoadLevel(**{key: value for key, value in level.items() if key in level_names}) for level in payload["levels"])
        return LoadRace(payload["engine"], tuple(payload["clients"]), rows, levels, payload["prompts"], payload["new_tokens"],
                        payload["repeats"], payload["threads"], payload["slot_context"], payload.get("threads_source", ""),
                        tuple(payload["notes"].items()), tuple(payload["about"].items()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise PolyplanError(f"{path}: not the JSON `polyplan bench peers --clients ... --json` prints ({error})") from None
