"""Where llama-server's one KV stream (`--kv-unified`) puts each token, and so how many cells a
pass reads: the highest cell in use, not the count of cells held.

llama.cpp places a ubatch's tokens cell by cell (`llama_kv_cache::find_slot`, not contiguous,
src/llama-kv-cache.cpp): from the stream's head, the first empty cells in order, wrapping at the
end; the search starts at cell 0 instead where the head lies more than twice the ubatch past the
cells in use. After a ubatch the head is its last cell + 1. Removing a sequence's cells
(`llama_kv_cache::seq_rm`) empties them where they lie and moves the head back to the first one
emptied. llama-server removes a slot's rejected draft rows after each verification (every row past
the tokens it keeps) and, with `cache_prompt` off as `bench peers` sends it, all of a slot's cells
when the slot starts its next request's prompt: a finished request's cells stay in the stream until
then, and a slot that gets no more requests keeps them. In one stream the slots' tokens
interleave, so what a request frees leaves holes the next tokens fill, and the highest cell in use
(`llama_kv_cells::used_max_p1`, what `get_n_kv` pads and every pass reads) can stay near the
stream's high-water mark while requests come and go. `UnifiedStream` replays that. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

EMPTY = -1
DEFAULT_SLOT_CONTEXT = 4096  # tokens of context per llama-server slot in the commands polyplan prints (`-c` is N times it)


class UnifiedStream:
    """One KV stream of `size` cells shared by every slot, replayed as llama.cpp places and
    removes tokens: which slot holds each cell, each slot's cells in the order of their positions
    (a slot's positions run 0, 1, ... as it places them, so its last cells hold its last positions)."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"a KV stream needs at least one cell, got {size}")
        self.size = size
        self.owner = [EMPTY] * size
        self.cells: dict[int, list[int]] = {}  # slot -> the cells it holds, by position
        self.head = 0
        self.used = 0
        self.top = 0  # the highest cell in use + 1

    @property
    def free(self) -> int:
        """Cells no slot holds."""
        return self.size - self.used

    def extent(self) -> int:
        """The highest cell in use + 1 (`used_max_p1`): what a pass reads before padding."""
        return self.top

    def clear(self, slot: int) -> None:
        """Every cell of `slot` emptied (`seq_rm(slot, -1, -1)`: a new prompt without the cache)."""
        self.trim(slot, 0)

    def trim(self, slot: int, keep: int) -> None:
        """The cells of `slot` at positions `keep` and beyond emptied (`seq_rm(slot, keep, -1)`),
        the head moved back to the first one emptied."""
        held = self.cells.get(slot, [])
        if len(held) <= keep:
            return
        freed = held[keep:]
        del held[keep:]
        for index in freed:
            self.owner[index] = EMPTY
        self.used -= len(freed)
        self.head = min(self.head, min(freed))
        while self.top and self.owner[self.top - 1] == EMPTY:
            self.top -= 1

    def grow(self, cells: int) -> None:
        """`cells` more empty cells at the stream's end."""
        self.owner.extend([EMPTY] * cells)
        self.size += cells

    def place(self, rows: Iterable[tuple[int, int]], ubatch: int = 512) -> int:
        """The batch's `rows` ((slot, tokens) in batch order) placed, in ubatches of at most
        `ubatch` tokens (`find_slot` then `apply_ubatch`); the extent after the last (`extent`).
        A full stream is an error here, as llama.cpp's decode fails on it."""
        tokens = [slot for slot, count in rows for _ in range(count)]
        for start in range(0, len(tokens), ubatch):
            self._place_ubatch(tokens[start:start + ubatch])
        return self.top

    def _place_ubatch(self, slots: list[int]) -> None:
        count = len(slots)
        if count > self.free:
            raise ValueError(f"the KV stream of {self.size} cells has {self.free} free for {count} tokens")
        head = 0 if self.head > self.used + 2 * count else self.head
        found: list[int] = []
        while len(found) < count:
            if head >= self.size:
                head = 0
            if self.owner[head] == EMPTY:
                found.append(head)
            head += 1
        for index, slot in zip(found, slots):
            self.owner[index] = slot
            self.cells.setdefault(slot, []).append(index)
        self.used += count
        self.top = max(self.top, max(found) + 1)
        self.head = found[-1] + 1
