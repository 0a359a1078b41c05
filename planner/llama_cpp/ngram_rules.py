"""llama.cpp's n-gram drafters as rules (`DraftRule`), replayed through a llama-server session.

Each rule is a literal port of the pinned llama.cpp (`LLAMA_CPP_VERSION`), hashes included, so
hash collisions draft what they draft there; defaults are llama.cpp's (common/common.h,
common/arg.cpp). The stateful ones carry state across requests, so `replay_session` feeds them the
requests in the order the server sees them, calling `begin`, `draft` and `accept` as
tools/server/server-context.cpp does; with several slots (`serve_slots`) each slot runs its own
rule (`DraftRule.slot`), sharing what the server shares (ngram-mod's table), the slots' rounds
interleaved iteration by iteration as the server decodes them. What each rule does and what is
not modelled: docs/engines.md, "llama.cpp's n-gram rules as ported". Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import TargetStream
from polyplan.planner.exact.ngram_replay import LLAMA_CPP_DEFAULT_SIZES, ReplayRound, ngram_simple_draft

LLAMA_CPP_VERSION = "llama-cpp-python 0.3.36"  # the vendored llama.cpp every rule below is ported from
_NGRAM_MOD_DEFAULTS = (24, 48, 64)  # (n_match, n_min, n_max): common_params_speculative_ngram_mod, and --spec-default
SPEC_DEFAULT_FLAGS = ("--spec-type", "ngram-mod")  # what `--spec-default` sets: ngram-mod at _NGRAM_MOD_DEFAULTS (common/arg.cpp)
_NGRAM_MAP_DEFAULTS = (12, 48, 1)  # (size_n, size_m, min_hits): common_params_speculative_ngram_map
_MASK64 = (1 << 64) - 1
_MASK32 = (1 << 32) - 1


class DraftRule(Protocol):
    """What llama-server calls on one speculative implementation (common/speculative.cpp)."""

    def begin(self, prompt: Sequence[int]) -> None: ...

    def draft(self, history: Sequence[int], sampled: int) -> list[int]: ...

    def accept(self, accepted: int) -> None: ...

    def slot(self) -> DraftRule:
        """The rule the same server runs for another of its slots: a fresh one where each slot
        keeps its own state (common/speculative.cpp's per-sequence configs), one sharing what the
        server shares otherwise (ngram-mod's table)."""
        ...


class NGramSimpleRule:
    """`common_speculative_impl_ngram_simple` (common/speculative.cpp): stateless,
    `common_ngram_simple_draft` (common/ngram-map.cpp; `ngram_replay.ngram_simple_draft`)."""

    def __init__(self, size_n: int = LLAMA_CPP_DEFAULT_SIZES[0], size_m: int = LLAMA_CPP_DEFAULT_SIZES[1]) -> None:
        self.size_n, self.size_m = size_n, size_m

    def begin(self, prompt: Sequence[int]) -> None:
        pass

    def draft(self, history: Sequence[int], sampled: int) -> list[int]:
        return ngram_simple_draft(history, sampled, self.size_n, self.size_m)

    def accept(self, accepted: int) -> None:
        pass

    def slot(self) -> NGramSimpleRule:
        return self  # stateless: every slot drafts from its own history alone


class NGramModTable:
    """`common_ngram_mod`'s table (common/ngram-mod.cpp): 4M entries, each the token that followed
    the last n-gram hashed there; one per server, shared by every slot."""

    SIZE = 4 * 1024 * 1024
    MULTIPLIER = 6364136223846793005

    def __init__(self, n: int) -> None:
        self.n = n
        self.entries: dict[int, int] = {}  # index -> token (absent: EMPTY)
        self.resets = 0  # how often it was cleared (for tests and notes)

    def index(self, tokens: Sequence[int], start: int) -> int:
        res = 0
        for token in tokens[start:start + self.n]:
            res = (res * self.MULTIPLIER + token) & _MASK64
        return res % self.SIZE

    def add(self, tokens: Sequence[int], start: int) -> None:
        self.entries[self.index(tokens, start)] = tokens[start + self.n]

    def get(self, tokens: Sequence[int], start: int) -> int | None:
        return self.entries.get(self.index(tokens, start))

    def occupancy(self) -> float:
        return len(self.entries) / self.SIZE

    def reset(self) -> None:
        self.entries.clear()
        self.resets += 1


class NGramModRule:
    """`common_speculative_impl_ngram_mod` (common/speculative.cpp) for one slot: its own
    `seq_info` (i_last, n_draft_last, n_low, kept across the slot's requests) over the server's
    one `NGramModTable`, shared by every slot (docs/engines.md, "llama.cpp's n-gram rules as ported")."""

    def __init__(self, n_match: int = _NGRAM_MOD_DEFAULTS[0], n_min: int = _NGRAM_MOD_DEFAULTS[1],
                 n_max: int = _NGRAM_MOD_DEFAULTS[2], table: NGramModTable | None = None) -> None:
        if n_match < 1 or n_max < 1:
            raise PolyplanError(f"ngram-mod: n_match and n_max must be >= 1, got {n_match}, {n_max}")
        if table is not None and table.n != n_match:
            raise PolyplanError(f"ngram-mod: a table of {table.n}-grams cannot serve n_match {n_match}")
        self.n, self.n_min, self.n_max = n_match, n_min, n_max
        self.table = NGramModTable(n_match) if table is None else table
        self.i_last = 0
        self.n_draft_last = 0
        self.n_low = 0

    @property
    def resets(self) -> int:
        """How often the shared table was cleared, by any slot."""
        return self.table.resets

    def slot(self) -> NGramModRule:
        return NGramModRule(self.n, self.n_min, self.n_max, table=self.table)

    def begin(self, prompt: Sequence[int]) -> None:
        self.i_last = 0
        self.n_draft_last = 0
        if len(prompt) < self.n:
            return
        for i in range(len(prompt) - self.n):
            self.table.add(prompt, i)
        self.i_last = len(prompt) - self.n
        if self.table.occupancy() > 0.25:
            self.table.reset()

    def draft(self, history: Sequence[int], sampled: int) -> list[int]:
        self.n_draft_last = 0
        n, cur_len = self.n, len(history)
        if cur_len < n:
            return []
        if self.i_last + 32 < cur_len:
            for i in range(self.i_last, cur_len - n):
                self.table.add(history, i)
            self.i_last = cur_len - n
        result = list(history[cur_len - n + 1:]) + [sampled]
        for i in range(self.n_max):
            token = self.table.get(result, i)
            if token is None:
                if i < self.n_min:
                    return []
                break
            result.append(token)
        draft = result[n:]
        self.n_draft_last = len(draft)
        return draft

    def accept(self, accepted: int) -> None:
        if self.n_draft_last > 0:
            if accepted / self.n_draft_last < 0.25:
                self.n_low += 1
                if self.n_low >= 5:
                    self.table.reset()
                    self.n_low = 0
                    self.i_last = 0
            else:
                self.n_low = 0


@dataclass
class _Key:
    """`common_ngram_map_key`: values are [value_idx, value_num, n_accepted]."""

    key_idx: int
    stat_idx: int = 0
    key_num: int = 0
    values: list[list[int]] | None = None


class NGramMapRule:
    """`common_speculative_impl_ngram_map_k` (common/speculative.cpp) over `common_ngram_map`
    (common/ngram-map.cpp: `common_ngram_map_begin`, `_draft`, `_accept`), one per slot;
    `key_only` False is `ngram-map-k4v` (docs/engines.md, "llama.cpp's n-gram rules as ported")."""

    HASH_SIZE = 262144
    LCG_FACTOR = 2654435761
    MAX_VALUES = 4
    MAX_COUNT = 16380

    def __init__(self, size_n: int = _NGRAM_MAP_DEFAULTS[0], size_m: int = _NGRAM_MAP_DEFAULTS[1],
                 min_hits: int = _NGRAM_MAP_DEFAULTS[2], key_only: bool = True) -> None:
        if size_n < 1 or size_m < 1:
            raise PolyplanError(f"ngram-map: size_n and size_m must be >= 1, got {size_n}, {size_m}")
        self.n, self.m, self.min_hits, self.key_only = size_n, size_m, min_hits, key_only
        self.keys: list[_Key] = []
        self.key_map: dict[int, int] = {}  # hash -> start of an n-gram (absent: 0)
        self.key_map_last_idx = 0
        self.size_last_begin = 0
        self.idx_last_check = 0
        self.last_draft_created = False
        self.last_draft_key_idx = 0
        self.last_draft_value_idx = 0

    def _hash(self, tokens: Sequence[int], start: int) -> int:
        value = 0
        for token in tokens[start:start + self.n]:
            value = (value * self.LCG_FACTOR + token) & _MASK32
        return value % self.HASH_SIZE

    def _key_at(self, tokens: Sequence[int], start: int, key: Sequence[int]) -> bool:
        return start + self.n <= len(tokens) and all(tokens[start + k] == key[k] for k in range(self.n))

    def begin(self, prompt: Sequence[int]) -> None:
        n, m = self.n, self.m
        size_begin = len(prompt)
        cleanup = self.size_last_begin
        if cleanup > size_begin:
            cleanup = size_begin - n - m if size_begin > n + m else 0
        if size_begin < self.idx_last_check:
            self.key_map = {h: idx for h, idx in self.key_map.items() if idx < cleanup}
            self.key_map_last_idx = cleanup - 1 if cleanup > 0 else 0
            kept = []
            for key in self.keys:
                if key.key_idx >= cleanup:
                    continue
                if not self.key_only:
                    values = key.values
                    for j in range(self.MAX_VALUES - 1, -1, -1):
                        if values[j][0] != 0 and values[j][0] >= cleanup:
                            for k in range(j, self.MAX_VALUES - 1):
                                values[k] = list(values[k + 1])
                            values[-1][0] = values[-1][1] = 0
                    if values[0][0] == 0:
                        continue
                kept.append(key)
            self.keys = kept
        self.idx_last_check = size_begin
        self.size_last_begin = size_begin

    def draft(self, history: Sequence[int], sampled: int) -> list[int]:
        self.last_draft_created = False
        self.last_draft_key_idx = self.last_draft_value_idx = 0
        inp, n, m = history, self.n, self.m
        cur_len = len(inp)
        if cur_len < 2 * n + m:
            return []
        self.idx_last_check = cur_len
        key = list(inp[cur_len - n + 1:]) + [sampled]
        match_pos = 0
        idx_key = self.key_map.get(self._hash(key, 0), 0)
        if idx_key != 0 and idx_key < cur_len - n - m - 1 and self._key_at(inp, idx_key, key):
            match_pos = idx_key
        if match_pos == 0 and self.size_last_begin > n + m + 1:
            for j in range(self.size_last_begin - n - m - 1, self.key_map_last_idx, -1):
                if self._key_at(inp, j, key):
                    match_pos = j
                    break
        if match_pos == 0:
            for j in range(cur_len - n - m - 1, max(self.size_last_begin, self.key_map_last_idx), -1):
                if self._key_at(inp, j, key):
                    match_pos = j
                    break
        if self.size_last_begin > n + m + 1:
            for j in range(self.size_last_begin - n - m - 1, self.key_map_last_idx, -1):
                self.key_map.setdefault(self._hash(inp, j), j)
        for j in range(cur_len - n - m - 1, max(self.size_last_begin, self.key_map_last_idx), -1):
            self.key_map.setdefault(self._hash(inp, j), j)
        self.key_map_last_idx = max(cur_len - n - m - 1, self.key_map_last_idx)
        if match_pos == 0:
            return []
        offset = next((i for i, item in enumerate(self.keys) if self._key_at(inp, item.key_idx, key)), len(self.keys))
        if offset == len(self.keys):
            self.keys.append(_Key(match_pos, values=[[0, 0, m] for _ in range(self.MAX_VALUES)]))
        current = self.keys[offset]
        current.key_num = min(current.key_num + 1, self.MAX_COUNT)
        if self.key_only:
            self.last_draft_created, self.last_draft_key_idx, self.last_draft_value_idx = True, offset, 0
            return list(inp[match_pos + n:match_pos + n + min(m, current.values[0][2])])
        if current.key_num < self.min_hits:
            return []
        for i in range(current.stat_idx, match_pos + 1):
            if not self._key_at(inp, i, key):
                continue
            begin_value = i + n
            found = -1
            for v in range(self.MAX_VALUES):
                value = current.values[v]
                if value[0] == 0:
                    current.values[v] = [begin_value, 0, m]
                    found = v
                    break
                if all(inp[begin_value + j] == inp[value[0] + j] for j in range(m)):
                    found = v
                    break
            if found >= 0:
                current.values[found][1] = min(current.values[found][1] + 1, self.MAX_COUNT)
        current.stat_idx = match_pos
        max_occur, slot_max = 0, 0
        for v in range(self.MAX_VALUES):
            if current.values[v][1] > max_occur:
                max_occur, slot_max = current.values[v][1], v
        others = sum(current.values[v][1] for v in range(self.MAX_VALUES) if v != slot_max)
        if others > 0 and max_occur < 2 * others:
            return []
        self.last_draft_created, self.last_draft_key_idx, self.last_draft_value_idx = True, offset, slot_max
        # llama.cpp drafts the tokens after the current match, whichever m-gram won the count
        return list(inp[match_pos + n:match_pos + n + min(m, current.values[slot_max][2])])

    def accept(self, accepted: int) -> None:
        if self.last_draft_created:
            self.keys[self.last_draft_key_idx].values[self.last_draft_value_idx][2] = accepted

    def slot(self) -> NGramMapRule:
        return NGramMapRule(self.n, self.m, self.min_hits, self.key_only)  # one `common_ngram_map` per slot


class StdUnorderedCounts:
    """A token -> count map that iterates as libstdc++'s `std::unordered_map<int, int32_t>` does
    when built by `emplace` alone (GCC 12's `bits/hashtable.h`: `_M_insert_bucket_begin`,
    `_M_rehash_aux`; checked against the compiled map in tests/test_planner_ngram_rules.py; the
    rule: docs/engines.md, "llama.cpp's n-gram rules as ported")."""

    GROWTH = (13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229, 172933)

    def __init__(self) -> None:
        self.order: list[int] = []
        self.counts: dict[int, int] = {}
        self.buckets = 1

    @staticmethod
    def _placed(order: list[int], key: int, buckets: int) -> None:
        bucket = key % buckets
        first = next((i for i, item in enumerate(order) if item % buckets == bucket), 0)
        order.insert(first, key)

    def add(self, token: int) -> None:
        """Count `token` once more (`emplace(token, 1)` when new, else `++count`)."""
        if token in self.counts:
            self.counts[token] += 1
            return
        if len(self.order) + 1 > (self.buckets if self.buckets > 1 else 0):
            grown = next((size for size in self.GROWTH if size >= len(self.order) + 1), None)
            if grown is None:
                raise PolyplanError(f"ngram-cache replay: more than {self.GROWTH[-1]} tokens after one n-gram")
            order: list[int] = []
            for key in self.order:
                self._placed(order, key, grown)
            self.order, self.buckets = order, grown
        self._placed(self.order, token, self.buckets)
        self.counts[token] = 1

    def first_most(self) -> tuple[int, int, int]:
        """(the token with the highest count, the first in iteration order among equals, its
        count, the sum of all counts): `try_draft`'s loop with no static cache (every token's
        static count 1, so `count_primary * count_static > max` is `count > max`)."""
        best, most = self.order[0], 0
        for token in self.order:
            if self.counts[token] > most:
                best, most = token, self.counts[token]
        return best, most, sum(self.counts.values())


class NGramCacheRule:
    """`common_speculative_impl_ngram_cache` (common/speculative.cpp) over `common_ngram_cache_update`
    and `common_ngram_cache_draft` (common/ngram-cache.cpp), as llama-server runs it: no cache
    files, one context cache per slot, never cleared, `n_draft` 8 (`create_state_ngram_cache`);
    docs/engines.md, "llama.cpp's n-gram rules as ported"."""

    N_MAX = 4  # LLAMA_NGRAM_MAX (LLAMA_NGRAM_MIN is 1)
    N_STATIC = 2  # LLAMA_NGRAM_STATIC: no draft from a history shorter than this
    N_DRAFT = 8
    MIN_SAMPLES = (2, 2, 1, 1)  # draft_min_sample_size_lax, by n-gram size 1 … 4
    MIN_PERCENT = (66, 50, 50, 50)  # draft_min_percent_lax

    def __init__(self) -> None:
        self.context: dict[tuple[int, ...], StdUnorderedCounts] = {}
        self.cache_size = 0

    def _update(self, tokens: Sequence[int]) -> None:
        for size in range(1, self.N_MAX + 1):
            for i in range(size, len(tokens)):
                self.context.setdefault(tuple(tokens[i - size:i]), StdUnorderedCounts()).add(tokens[i])

    def begin(self, prompt: Sequence[int]) -> None:
        pass

    def draft(self, history: Sequence[int], sampled: int) -> list[int]:
        if self.cache_size < len(history) + 1:
            self._update(list(history[self.cache_size:]) + [sampled])
            self.cache_size = len(history) + 1
        tokens = list(history) + [sampled]
        if len(tokens) < self.N_STATIC:
            return []
        draft: list[int] = []
        while len(draft) < self.N_DRAFT:
            token = self._next(tokens + draft)
            if token is None:
                break
            draft.append(token)
        return draft

    def _next(self, tokens: Sequence[int]) -> int | None:
        for size in range(self.N_MAX, 0, -1):
            part = self.context.get(tuple(tokens[-size:])) if len(tokens) >= size else None
            if part is None:
                continue
            token, most, total = part.first_most()
            if total < self.MIN_SAMPLES[size - 1] or 100 * most < self.MIN_PERCENT[size - 1] * total:
                continue
            return token
        return None

    def accept(self, accepted: int) -> None:
        pass

    def slot(self) -> NGramCacheRule:
        return NGramCacheRule()  # one context cache per slot


# --------------------------------------------------------------------------- the server's loop


class _Request:
    """One request as a slot serves it with `rule`: `begin` on its prompt (the first token comes
    from the prefill), then rounds of `draft` (cut to the tokens left minus one, the server's
    n_draft_max; no draft call when none may be drafted) and `verify` (the greedy target keeps the
    draft up to its first disagreement with the stream; `accept` after a round that drafted)."""

    def __init__(self, rule: DraftRule, stream: TargetStream, new_tokens: int | None) -> None:
        self.rule = rule
        self.history = list(stream.ids[:stream.prompt_tokens])
        self.continuation = stream.ids[stream.prompt_tokens:]
        self.total = len(self.continuation) if new_tokens is None else min(new_tokens, len(self.continuation))
        self.generated = 1
        self.sampled = self.continuation[0] if self.continuation else -1
        self.rounds: list[ReplayRound] = []
        rule.begin(self.history)

    @property
    def done(self) -> bool:
        return self.generated >= self.total

    def draft(self) -> list[int]:
        room = self.total - self.generated - 1  # the server's n_draft_max: n_remaining - 1
        return self.rule.draft(self.history, self.sampled)[:room] if room > 0 else []

    def verify(self, draft: Sequence[int]) -> None:
        at = self.generated
        accepted = 0
        while accepted < len(draft) and draft[accepted] == self.continuation[at + accepted]:
            accepted += 1
        if draft:
            self.rule.accept(accepted)
        self.rounds.append(ReplayRound(len(draft), accepted))
        self.history.append(self.sampled)
        self.history.extend(self.continuation[at:at + accepted])
        self.sampled = self.continuation[at + accepted]
        self.generated += accepted + 1


def replay_request(rule: DraftRule, stream: TargetStream, new_tokens: int | None = None) -> tuple[ReplayRound, ...]:
    """The rounds llama-server runs with `rule` (its state carried over from earlier requests) for
    one request whose greedy output is the stream's continuation (its first `new_tokens`; all
    when None), alone on its server (`_Request`)."""
    request = _Request(rule, stream, new_tokens)
    while not request.done:
        request.verify(request.draft())
    return tuple(request.rounds)


@dataclass(frozen=True)
class SessionReplay:
    """The rounds of every request of one server session, in the order served, and which
    stream (prompt) each request was."""

    requests: tuple[tuple[ReplayRound, ...], ...]
    stream_of: tuple[int, ...]

    @property
    def drafted(self) -> int:
        return sum(item.drafted for rounds in self.requests for item in rounds)

    @property
    def accepted(self) -> int:
        return sum(item.accepted for rounds in self.requests for item in rounds)


def replay_session(streams: Sequence[TargetStream], make_rule: Callable[[], DraftRule], *, new_tokens: int | None = None,
                   repeats: int = 1, order: Sequence[int] | None = None) -> SessionReplay:
    """One llama-server (one rule, its state kept) serving the streams in order (`order`: the
    stream numbers in the order served; default as given), the whole sequence `repeats` times
    (as `bench peers` sends its prompts: each repeat in turn)."""
    if repeats < 1:
        raise PolyplanError(f"n-gram replay: repeats must be >= 1, got {repeats}")
    served = range(len(streams)) if order is None else order
    rule = make_rule()
    requests, stream_of = [], []
    for _ in range(repeats):
        for number in served:
            requests.append(replay_request(rule, streams[number], new_tokens))
            stream_of.append(number)
    return SessionReplay(tuple(requests), tuple(stream_of))


def serve_slots(streams: Sequence[TargetStream], make_rule: Callable[[], DraftRule], stream_of: Sequence[int], clients: int, *,
                new_tokens: int | None = None, load: int | None = None) -> SessionReplay:
    """The requests `stream_of` (stream numbers, in the order sent) as llama-server with `clients`
    slots serves them: slot c runs its own rule (`make_rule()` for the first, `DraftRule.slot` of
    it for the others, sharing what the server shares) and serves requests c, c + clients, ... of
    each load of `load` consecutive requests (None: one load), the loads one after another with
    the rules' state kept, as `bench peers` sends each repeat. Iteration by iteration, as
    `planner.llama_cpp.under_load.simulate_load` times them: every decoding slot drafts, then each
    verifies and accepts in slot order; a request's prompt takes the iteration after its slot's
    last one ended, and it drafts from the next. At one slot this is `replay_session`'s order.

    Raises:
        PolyplanError: `clients` or `load` below 1.
    """
    if clients < 1 or (load is not None and load < 1):
        raise PolyplanError(f"n-gram replay: slots and load must be >= 1, got {clients}, {load}")
    first = make_rule()
    rules = [first, *(first.slot() for _ in range(clients - 1))]
    rounds: list[tuple[ReplayRound, ...]] = [()] * len(stream_of)
    size = len(stream_of) if load is None else load
    for start in range(0, len(stream_of), size):
        sent = list(range(start, min(start + size, len(stream_of))))
        queues = [sent[c::clients] for c in range(clients)]
        serving: list[tuple[int, _Request] | None] = [None] * clients
        while any(queues) or any(serving):
            drafts = [None if item is None else item[1].draft() for item in serving]
            for c in range(clients):
                if serving[c] is not None:
                    number, request = serving[c]
                    request.verify(drafts[c])
                    if request.done:
                        rounds[number], serving[c] = tuple(request.rounds), None
                elif queues[c]:
                    number = queues[c].pop(0)
                    request = _Request(rules[c], streams[stream_of[number]], new_tokens)
                    serving[c] = None if request.done else (number, request)
    return SessionReplay(tuple(rounds), tuple(stream_of))


LLAMA_CPP_RULES: dict[str, tuple[Callable[[], DraftRule], tuple[str, ...]]] = {
    # llama-server type: (its rule at llama.cpp's defaults, the flags that ask for it)
    "ngram-simple": (NGramSimpleRule, ("--spec-type", "ngram-simple")),
    "ngram-map-k": (lambda: NGramMapRule(key_only=True), ("--spec-type", "ngram-map-k")),
    "ngram-map-k4v": (lambda: NGramMapRule(key_only=False), ("--spec-type", "ngram-map-k4v")),
    "ngram-mod": (NGramModRule, ("--spec-type", "ngram-mod")),
    "ngram-cache": (NGramCacheRule, ("--spec-type", "ngram-cache")),
}


def spec_options(flags: Sequence[str], spec_type: str, allowed: set[str]) -> dict[str, str] | None:
    """The options of llama-server flags (after `-m TARGET`) asking for `--spec-type spec_type`
    alone, by flag; None for anything else (another type, a combination, a flag not in `allowed`)."""
    flags = tuple(flags)
    options = dict(zip(flags[2::2], flags[3::2]))
    if flags[:2] != ("--spec-type", spec_type) or len(flags) % 2 or not options.keys() <= allowed:
        return None
    return options


def ngram_simple_flag_sizes(flags: Sequence[str]) -> tuple[int, int] | None:
    """(size-n, size-m) of a llama-server `ngram-simple` configuration's flags, llama.cpp's
    defaults where not given (`LLAMA_CPP_DEFAULT_SIZES`); None for anything else (`spec_options`)."""
    options = spec_options(flags, "ngram-simple", {"--spec-ngram-simple-size-n", "--spec-ngram-simple-size-m"})
    if options is None or not all(value.isdigit() and int(value) > 0 for value in options.values()):
        return None
    return (int(options.get("--spec-ngram-simple-size-n", LLAMA_CPP_DEFAULT_SIZES[0])),
            int(options.get("--spec-ngram-simple-size-m", LLAMA_CPP_DEFAULT_SIZES[1])))


def rule_for_flags(flags: Sequence[str]) -> tuple[str, Callable[[], DraftRule]] | None:
    """The rule llama-server runs for `flags` (after `-m TARGET`) and its label, where it is one
    replayed here: an n-gram type at its defaults (`LLAMA_CPP_RULES`: "ngram-mod (defaults)"),
    or ngram-simple with its `--spec-ngram-simple-size-n`/`-size-m` ("ngram-simple size-n=3
    K=15"); None for anything else (a draft model, a combination, a flag the replay does not model)."""
    flags = tuple(flags)
    for kind, (make_rule, rule_flags) in LLAMA_CPP_RULES.items():
        if flags == rule_flags:
            return f"{kind} (defaults)", make_rule
    sizes = ngram_simple_flag_sizes(flags)
    if sizes is None:
        return None
    size_n, size_m = sizes
    return f"ngram-simple size-n={size_n} K={size_m}", lambda: NGramSimpleRule(size_n, size_m)
