"""The n-level chain: staged speculative decoding, lossless for any n >= 1 (`generate`).

The recursion of docs/design.md ("The decoder: staged verification for any n"): `draft(n, K)` is
M_n sampling K tokens (a `BlockDrafter` proposes up to K in one call, possibly none); `draft(i, K)`,
i < n, runs rounds of { `draft(i+1, K_i)` → m tokens; ONE pass of M_i over [pending, d_1..d_m];
verify left to right; emit a recovered or bonus token; cut M_i..M_n back to the committed prefix }
until ≥ K tokens are gathered, each an exact sample of M_i carried up with q_i (the p above).

State is one token buffer shared by all levels: level i's working sequence is always a prefix of
level i+1's, so a level only tracks where its sequence ends; each member's cache holds a prefix of
it and is fed its pending tokens with its next pass. A `formats.plan.DraftPolicy` reads only the
drafter's context and the verified rounds, so every verified token is still an exact sample.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch

from polyplan.decoder.member import ArgmaxForward, BlockDrafter, ChainMember, ConfidentArgmax
from polyplan.decoder.result import GenerationResult, LevelStats, PassTally
from polyplan.decoder.sampling import Sampling, argmax_ids, probabilities, sample, top_probability
from polyplan.decoder.verify import verify_greedy, verify_sampled
from polyplan.formats.errors import PolyplanError
from polyplan.formats.plan import FIXED_DRAFTS, DraftPolicy, VerifyWidths


def generate(
    chain: Sequence[ChainMember],
    prompt_ids: Sequence[int] | torch.Tensor,
    *,
    max_new_tokens: int,
    block_sizes: Sequence[int] = (),
    sampling: Sampling = Sampling(),
    generator: torch.Generator | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    verify_widths: Sequence[VerifyWidths] = (),
    on_tokens: Callable[[tuple[int, ...]], None] | None = None,
    draft_policy: DraftPolicy | None = None,
) -> GenerationResult:
    """Generate with the chain M_1 (target, `chain[0]`) … M_n (cheapest, `chain[-1]`).

    Args:
        chain: n >= 1 members sharing one vocabulary (checked where they are loaded,
            `decoder.compatibility`): n = 1 is plain decoding, n = 2 classic speculative
            decoding, n >= 3 staged verification.
        prompt_ids: The prompt, 1-D (or 2-D with one row); batches are not supported.
        max_new_tokens: Exactly this many tokens are returned unless EOS comes first.
        block_sizes: K_1 … K_{n-1}: level i asks the sub-chain below for K_i tokens per round.
        sampling: Temperature (0 = greedy), top-k and top-p, applied at every level.
        generator: Every random draw comes from it (on the members' device): one seed, one output.
        eos_token_id: Stop after emitting this token (or any of these, e.g.
            `member.stop_token_ids(chain[0])`); None never stops early.
        verify_widths: Per verifying level (n − 1 of them, or none: never pad), the width its
            passes run at (`formats.plan.VerifyWidths`): a pass over k tokens is padded with
            copies of its last token up to `width(k)`; attention is causal, so only the time changes.
        on_tokens: Called with the output's new tokens as they are committed, in order (for
            streaming); their concatenation is `token_ids`.
        draft_policy: How the last member chooses its draft lengths (`formats.plan.DraftPolicy`);
            None: a fixed K_{n-1}.

    Returns the new tokens and per-level statistics; raises PolyplanError naming the argument or
    member at fault.
    """
    members = list(chain)
    prompt = _check_prompt(prompt_ids)
    vocab = _check_chain(members)
    blocks = _check_blocks(block_sizes, len(members))
    widths = _check_widths(verify_widths, len(members))
    policy = _check_policy(draft_policy, members, blocks)
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise PolyplanError(f"max_new_tokens: {max_new_tokens!r} must be an integer >= 1")
    if max(prompt) >= vocab or min(prompt) < 0:
        raise PolyplanError(f"prompt_ids: token ids must lie in [0, {vocab}), got {min(prompt)}..{max(prompt)}")
    lookahead = context_reserve(blocks, widths, policy)
    _check_context(members, len(prompt), max_new_tokens, lookahead)
    eos = None if eos_token_id is None else frozenset([eos_token_id] if isinstance(eos_token_id, int) else eos_token_id)

    started = time.perf_counter()
    with torch.inference_mode():
        for member in members:
            member.reset()
        run = _Run(members, blocks, sampling, generator, vocab, prompt, len(prompt) + max_new_tokens + lookahead, widths, on_tokens,
                   policy)
        end, stopped_at_eos = run.top(len(prompt), max_new_tokens, eos)
        for member in members:
            if member.cache_length > end:
                member.crop(end)
        new_tokens = tuple(run.buf[len(prompt) : end].tolist())
    elapsed = time.perf_counter() - started
    return GenerationResult(new_tokens, run.statistics(), elapsed, stopped_at_eos)


class _Run:
    """Mutable state of one `generate` call: the token buffer and the per-level counters."""

    def __init__(
        self,
        members: list[ChainMember],
        blocks: tuple[int, ...],
        sampling: Sampling,
        generator: torch.Generator | None,
        vocab: int,
        prompt: list[int],
        capacity: int,
        widths: tuple[VerifyWidths, ...] = (),
        on_tokens: Callable[[tuple[int, ...]], None] | None = None,
        policy: DraftPolicy = FIXED_DRAFTS,
    ) -> None:
        self.members = members
        self.policy = policy
        self.cap = blocks[-1] if blocks else 0  # the last member's draft length this round (moves with an adaptive cap)
        self.widths = widths
        self.on_tokens = on_tokens
        self.last = len(members) - 1
        self.blocks = blocks
        self.sampling = sampling
        self.greedy = sampling.greedy
        self.own_argmax = [isinstance(member, ArgmaxForward) for member in members]  # takes its argmax itself
        self.generator = generator
        self.vocab = vocab
        device = generator.device if generator is not None else getattr(members[0], "device", torch.device("cpu"))
        self.buf = torch.zeros(capacity, dtype=torch.int64, device=device)  # (capacity,)
        self.buf[: len(prompt)] = torch.tensor(prompt, dtype=torch.int64)
        n = len(members)
        self.passes = [0] * n
        self.proposed = [0] * n
        self.accepted = [0] * n
        self.per_verification: list[list[int]] = [[] for _ in range(n)]
        self.seconds = [0.0] * n
        self.by_width: list[dict[int, list[float]]] = [{} for _ in range(n)]  # width -> [passes, seconds, context sum]

    def _tally(self, i: int, width: int, context: int, seconds: float) -> None:
        self.seconds[i] += seconds
        self.passes[i] += 1
        tally = self.by_width[i].setdefault(width, [0, 0.0, 0.0])
        tally[0] += 1
        tally[1] += seconds
        tally[2] += context

    def _committed(self, i: int, tokens: list[int]) -> None:
        if i == 0 and tokens and self.on_tokens is not None:
            self.on_tokens(tuple(tokens))

    def statistics(self) -> tuple[LevelStats, ...]:
        return tuple(
            LevelStats(m.name, self.passes[i], self.proposed[i], self.accepted[i], tuple(self.per_verification[i]), self.seconds[i],
                       tuple(PassTally(w, int(t[0]), t[1], t[2] / t[0]) for w, t in sorted(self.by_width[i].items())))
            for i, m in enumerate(self.members)
        )

    def top(self, start: int, want: int, eos: frozenset[int] | None) -> tuple[int, bool]:
        """Run M_1 until `want` new tokens or EOS; returns (end of the output, stopped at EOS)."""
        run_level = self._autoregress if self.last == 0 else self._rounds
        end, _, stopped = run_level(0, start, want, eos)
        return min(end, start + want), stopped  # the last round may overshoot `want`

    def _pass(self, i: int, end: int, keep_last: int, pad: bool, call: Callable[..., torch.Tensor]) -> torch.Tensor:
        """`call` (member i's `forward` or `forward_argmax`) over its pending buf[cache_length:end],
        for the last `keep_last` positions; `pad`: at `self.widths[i]`'s width, the padding's rows
        dropped (the caller crops the cache). On an asynchronous device this times mostly launches."""
        context = self.members[i].cache_length
        ids = self.buf[context:end]  # (k,)
        extra = self.widths[i].width(len(ids)) - len(ids) if pad and self.widths else 0
        if extra:
            ids = torch.cat([ids, ids[-1:].expand(extra)])  # (width,)
        began = time.perf_counter()
        out = call(ids, keep_last=keep_last + extra)
        if extra:
            out = out[:keep_last]
        self._tally(i, len(ids), context, time.perf_counter() - began)
        return out

    def _logits(self, i: int, end: int, keep_last: int, pad: bool = False) -> torch.Tensor:
        """Member i's logits at its last `keep_last` positions `(keep_last, V)` (see `_pass`)."""
        return self._pass(i, end, keep_last, pad, self.members[i].forward)[:, : self.vocab]

    def _argmax(self, i: int, end: int, keep_last: int, pad: bool = False) -> torch.Tensor:
        """Greedy: member i's argmax `(keep_last,)`, inside the timed pass where it has `forward_argmax`."""
        if self.own_argmax[i]:
            return self._pass(i, end, keep_last, pad, self.members[i].forward_argmax)
        return argmax_ids(self._logits(i, end, keep_last, pad))

    def _draft(self, i: int, start: int, want: int) -> tuple[int, torch.Tensor | None]:
        """draft(i, want): ≥ `want` exact samples of M_i written at buf[start:] (a block
        drafter: 0 … want proposals); returns their count and their q_i rows `(count, V)`
        (None when greedy)."""
        if i == self.last and isinstance(self.members[i], BlockDrafter):
            return self._draft_block(i, start, want)
        if i == self.last:
            end, rows, _ = self._autoregress(i, start, want, None, self.policy.p_min)
        else:
            end, rows, _ = self._rounds(i, start, want, None)
        return end - start, rows

    def _draft_block(self, i: int, start: int, want: int) -> tuple[int, torch.Tensor | None]:
        """A block drafter's one call: up to `want` proposals at buf[start:], one-hot rows."""
        member = self.members[i]
        context = member.cache_length
        began = time.perf_counter()
        block = member.draft_block(self.buf[context:start], want)[:want]
        self._tally(i, want, context, time.perf_counter() - began)  # a block drafter's T(k) is priced at the k asked for
        m = len(block)
        if m:
            self.buf[start : start + m] = torch.tensor(block, dtype=torch.int64)
        if self.greedy:
            return m, None
        rows = torch.zeros(m, self.vocab, device=self.buf.device)  # (m, V)
        rows[torch.arange(m), self.buf[start : start + m]] = 1.0
        return m, rows

    def _confident_argmax(self, i: int, end: int) -> tuple[torch.Tensor, float]:
        """Greedy: member i's argmax after buf[:end] `(1,)` and its softmax probability at
        temperature 1 (a `ConfidentArgmax` member takes both in its own buffer)."""
        member = self.members[i]
        if isinstance(member, ConfidentArgmax):
            token, top = self._pass(i, end, 1, False, member.forward_argmax_confidence)
            return token, float(top[0])
        logits = self._logits(i, end, 1)  # (1, V)
        return argmax_ids(logits), float(top_probability(logits)[0])

    def _autoregress(
        self, i: int, start: int, want: int, eos: frozenset[int] | None, p_min: float | None = None
    ) -> tuple[int, torch.Tensor | None, bool]:
        """M_i samples `want` tokens one at a time; returns (end, q_i rows or None, hit EOS). With
        `p_min` (the last member's confidence stop) it stops before the first token whose top
        probability is below `p_min`, as llama.cpp's draft-simple does (greedy: the softmax at
        temperature 1); rows at a temperature are then `(count, V)`, possibly empty."""
        rows = []
        pos = start
        for _ in range(want):
            if self.greedy:
                token, top = self._confident_argmax(i, pos) if p_min is not None else (self._argmax(i, pos, 1), 1.0)
            else:
                probs = probabilities(self._logits(i, pos, 1), self.sampling)  # (1, V)
                top = float(probs.max()) if p_min is not None else 1.0
            if p_min is not None and top < p_min:  # a host sync per drafted token: the stop is control flow
                break
            if not self.greedy:
                token = sample(probs, self.generator)
                rows.append(probs)
            self.buf[pos : pos + 1] = token
            pos += 1
            if i == 0 and self.on_tokens is not None:  # a host sync per token, only when streaming
                self.on_tokens((int(token),))
            if eos is not None and int(token) in eos:  # a host sync per token, only when stopping on EOS
                return pos, None, True
        if rows or self.greedy:
            return pos, (torch.cat(rows) if rows else None), False
        return pos, torch.zeros(0, self.vocab, device=self.buf.device), False

    def _rounds(
        self, i: int, start: int, want: int, eos: frozenset[int] | None
    ) -> tuple[int, torch.Tensor | None, bool]:
        """Verification rounds of M_i over drafts of the sub-chain below, until ≥ `want` tokens
        (or an emitted EOS within the first `want`); returns (end, q_i rows of every gathered
        token or None, hit EOS). Rows are only kept below the top level, where someone uses them."""
        last_level = i == self.last - 1
        keep_rows = i > 0 and not self.greedy
        rows = []
        pos = start
        while pos - start < want:
            m, p = self._draft(i + 1, pos, self.cap if last_level else self.blocks[i])  # drafted tokens at buf[pos : pos + m]
            draft = self.buf[pos : pos + m]
            if self.greedy:
                accepted, emitted = verify_greedy(self._argmax(i, pos + m, m + 1, pad=True), draft)
            else:
                q = probabilities(self._logits(i, pos + m, m + 1, pad=True), self.sampling)  # (m+1, V)
                accepted, emitted = verify_sampled(p, q, draft, self.generator)
            # The one device-to-host transfer of this step: [emitted (m+1), accepted (m), draft (m)].
            host = torch.cat([emitted, accepted.long(), draft]).tolist()
            flags = host[m + 1 : 2 * m + 1]
            a = flags.index(0) if 0 in flags else m
            self.buf[pos + a : pos + a + 1] = emitted[a : a + 1]  # the recovered or bonus token
            for j in range(i, len(self.members)):  # cut M_i..M_n back to the committed prefix (and any padding)
                if self.members[j].cache_length > pos + a:
                    self.members[j].crop(pos + a)
            self.proposed[i] += m
            self.accepted[i] += a
            if last_level:
                self.cap = self.policy.next_cap(self.cap, m, a)
            self.per_verification[i].append(a + 1)
            if keep_rows:
                rows.append(q[: a + 1])
            new = host[2 * m + 1 : 2 * m + 1 + a] + [host[a]]  # the tokens this round committed
            left = want - (pos - start)  # the last round may overshoot `want`
            hits = [k for k, token in enumerate(new) if token in eos] if eos is not None else []
            if hits and hits[0] < left:
                self._committed(i, new[: hits[0] + 1])
                return pos + hits[0] + 1, None, True
            self._committed(i, new[:left])
            pos += a + 1
        return pos, (torch.cat(rows) if rows else None), False


def _check_prompt(prompt_ids: Sequence[int] | torch.Tensor) -> list[int]:
    if isinstance(prompt_ids, torch.Tensor):
        if prompt_ids.dim() == 2:
            if prompt_ids.shape[0] != 1:
                raise PolyplanError(
                    f"prompt_ids: batch size {prompt_ids.shape[0]} is not supported; generate one sequence at a time"
                )
            prompt_ids = prompt_ids[0]
        if prompt_ids.dim() != 1:
            raise PolyplanError(f"prompt_ids: expected a 1-D sequence of token ids, got shape {tuple(prompt_ids.shape)}")
        prompt = prompt_ids.tolist()
    else:
        prompt = list(prompt_ids)
        if prompt and isinstance(prompt[0], (list, tuple)):
            if len(prompt) != 1:
                raise PolyplanError(f"prompt_ids: batch size {len(prompt)} is not supported; generate one sequence at a time")
            prompt = list(prompt[0])
    if not prompt:
        raise PolyplanError("prompt_ids: empty; give at least one token")
    if not all(isinstance(t, int) for t in prompt):
        raise PolyplanError("prompt_ids: token ids must be integers")
    return prompt


def _check_chain(members: list[ChainMember]) -> int:
    """The chain's vocabulary size: the target's (the members' is checked where they are loaded)."""
    if not members:
        raise PolyplanError("chain: empty; give at least the target model")
    return members[0].valid_vocab_size


def _check_blocks(block_sizes: Sequence[int], n: int) -> tuple[int, ...]:
    blocks = tuple(block_sizes)
    if len(blocks) != n - 1:
        raise PolyplanError(
            f"block_sizes: a chain of {n} members needs {n - 1} block size(s) (one per verifying level), got {len(blocks)}"
        )
    for index, block in enumerate(blocks):
        if not isinstance(block, int) or block < 1:
            raise PolyplanError(f"block_sizes[{index}]: {block!r} must be an integer >= 1")
    return blocks


def _check_widths(verify_widths: Sequence[VerifyWidths], n: int) -> tuple[VerifyWidths, ...]:
    widths = tuple(verify_widths)
    if widths and len(widths) != n - 1:
        raise PolyplanError(
            f"verify_widths: a chain of {n} members needs {n - 1} width maps (one per verifying level) or none, got {len(widths)}"
        )
    for index, item in enumerate(widths):
        if not isinstance(item, VerifyWidths):
            raise PolyplanError(f"verify_widths[{index}]: must be a formats.plan.VerifyWidths, got {type(item).__name__}")
    return widths


def _check_policy(policy: DraftPolicy | None, members: list[ChainMember], blocks: tuple[int, ...]) -> DraftPolicy:
    if policy is None or policy == FIXED_DRAFTS:
        return FIXED_DRAFTS
    if not isinstance(policy, DraftPolicy):
        raise PolyplanError(f"draft_policy: must be a formats.plan.DraftPolicy, got {type(policy).__name__}")
    if len(members) < 2:
        raise PolyplanError("draft_policy: a chain of the target alone drafts nothing; give a drafter or no policy")
    if policy.p_min is not None and isinstance(members[-1], BlockDrafter):
        raise PolyplanError(
            f"draft_policy: p_min {policy.p_min:g} stops a model drafter on its confidence; "
            f"{members[-1].name!r} drafts by rule and has none"
        )
    policy.check_block(blocks[-1], f"last block size (block_sizes[{len(blocks) - 1}])")
    return policy


def context_reserve(block_sizes: Sequence[int], verify_widths: Sequence[VerifyWidths] = (),
                    draft_policy: DraftPolicy | None = None) -> int:
    """Context a chain needs beyond the committed prefix: the deepest draft lookahead (an adaptive
    cap at its widest) plus the widest padding of a verification pass. The lookahead is B_2(K_1) =
    K_1 + … + K_{n-1}: draft(n, K) returns K tokens and draft(i, K) at most K + B_{i+1}(K_i) (its
    last round starts below K and adds up to B_{i+1}(K_i) + 1)."""
    blocks = tuple(block_sizes)
    if blocks and draft_policy is not None:
        blocks = blocks[:-1] + (max(blocks[-1], draft_policy.widest(blocks[-1])),)
    return sum(blocks) + max((widths.max_padding for widths in verify_widths), default=0)


def _check_context(members: list[ChainMember], prompt_length: int, max_new_tokens: int, lookahead: int) -> None:
    for index, member in enumerate(members):
        if member.max_context is None:
            continue
        label = f"chain member {index} ({member.name!r})"
        if prompt_length > member.max_context:
            raise PolyplanError(
                f"prompt_ids: {prompt_length} tokens is longer than the context of {label} ({member.max_context} tokens)"
            )
        if prompt_length + max_new_tokens + lookahead > member.max_context:
            raise PolyplanError(
                f"max_new_tokens: prompt ({prompt_length}) + {max_new_tokens} new tokens + {lookahead} drafted ahead "
                f"exceeds the context of {label} ({member.max_context} tokens)"
            )
