"""Acceptance statistics of a (verifier, drafter) pair, measured two ways.

Notation (docs/design.md): the drafter's distribution is p, the verifier's q; a drafted token is
accepted with probability min(1, q/p), so the acceptance rate at one position is
α_t = Σ_x min(p_t(x), q_t(x)) (greedy: 1 when the argmaxes agree, else 0).

1. **From distributions** (`teacher_forced`, `pair_alpha`): the target continues every prompt;
   each model reads prompt + continuation teacher-forced, in passes of `TEACHER_FORCING_WIDTH`
   tokens with its KV cache, which gives its distribution at every position, so n models cost
   one read each for all n² pairs (greedy, the target's read is its continuation itself,
   `own_greedy_read`). Short passes, as a chain's verifications run, because a model
   whose numerics depend on the batch (dynamic int8: one activation scale per pass) agrees with
   the target differently in one long pass (docs/profiling.md, "What it measures"). α is the
   mean of α_t with a bootstrap interval over prompts; it implies μ(K) by eq. 3 under i.i.d.
   acceptance and, keeping how α_t varies along a sequence, the *positional* μ (`positional_mu`).
2. **Decoded** (`measure_decoded`): the decoder's n = 2 mode at block size K over the prompts;
   μ, σ of the tokens emitted per verification, with bootstrap intervals over prompts. Greedy with
   the target verifying, the same counts follow from way 1's agreement along the target's
   continuation (`replay_counts`), which `profiler.run` uses instead of decoding.

Way 1 also gives the acceptance under the *engines'* rule (vLLM, llama.cpp): the verifier keeps
the drafter's argmax x̂ with probability q_t(x̂) (`PairAlpha.engine`; equal to α_t when greedy or
for a one-hot drafter). The contexts of way 1 are the *target's* continuations for every pair; a
decoded run whose verifier is not the target follows the verifier's own samples, one source of
disagreement between the two ways.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from polyplan.decoder.chain import generate
from polyplan.decoder.member import ArgmaxForward, ChainMember, stop_token_ids
from polyplan.decoder.sampling import Sampling, argmax_ids, probabilities, top_probability
from polyplan.decoder.ngram_simple import NGramSimpleMember
from polyplan.formats.profile import DRAFT_SIMPLE_TOP_K, TargetStream
from polyplan.planner.exact.latency import LatencyCurve
from polyplan.profiler.settings import AcceptanceSettings
from polyplan.profiler.stream_drafting import SIZE_N, stream_block
from polyplan.profiler.stats import Interval, cluster_bootstrap, lag1_autocorrelation, quantile_summary

TEACHER_FORCING_WIDTH = 4  # tokens per teacher-forced pass (the module docstring says why)


@dataclass(frozen=True)
class TeacherForced:
    """One model's next-token choice or distribution at every continuation position.

    Greedy: `argmax[i]`, the argmax at each position of prompt i `(L_i,)`, `probs` None. Sampled:
    `probs[i]`, the distribution `(L_i, V)` float32 on CPU."""

    argmax: tuple[torch.Tensor, ...] | None
    probs: tuple[torch.Tensor, ...] | None
    top: tuple[torch.Tensor, ...] | None = None  # greedy: the softmax probability (temperature 1) of each argmax
    # greedy: the same over the model's DRAFT_SIMPLE_TOP_K largest logits (what llama-server's p_min reads)
    top10: tuple[torch.Tensor, ...] | None = None
    # greedy, where asked (`teacher_forced(past=...)`): the argmax at each position past the
    # continuation, read on in the same passes (a replayed run's last verification drafts there)
    past_argmax: tuple[torch.Tensor, ...] | None = None


@dataclass(frozen=True)
class GreedyReads:
    """What a run's greedy phase read: the target's greedy `continuations` of `prompts` (`new_tokens`
    each, generator seeds from `seed`) and the greedy teacher-forced pass of each model named in
    `forced` over them, at `TEACHER_FORCING_WIDTH` (never the target: `own_greedy_read`). Handed on so that what needs the same reads
    (`profiler.agreement_runs`) does not repeat them; kept in memory only."""

    prompts: tuple[tuple[int, ...], ...]
    new_tokens: int
    seed: int
    continuations: tuple[tuple[int, ...], ...]
    forced: Mapping[str, TeacherForced]

    def fits(self, prompts: Sequence[Sequence[int]], new_tokens: int, seed: int) -> bool:
        """Whether these reads are of exactly `prompts`, `new_tokens` and `seed`."""
        return (self.new_tokens, self.seed) == (new_tokens, seed) and self.prompts == tuple(tuple(p) for p in prompts)


@dataclass(frozen=True)
class PairAlpha:
    """Distribution-based acceptance of one pair under one sampling mode.

    Attributes:
        alpha, raw_alpha: the mean per-position rate over `samples` positions, capped just below 1
            (`cap_alpha`) and before capping; `interval`: its bootstrap interval over prompts.
        std, quantiles, autocorrelation: the spread of α_t over positions (quantile keys
            "0.1" … "0.9") and its lag-1 autocorrelation along a sequence (None if undefined).
        per_prompt: α_t for each prompt (float64 arrays), for the positional μ.
        engine: the same summary of the engines' rule q_t(argmax p_t) (None inside it).
    """

    alpha: float
    raw_alpha: float
    samples: int
    interval: Interval
    std: float
    quantiles: dict[str, float]
    autocorrelation: float | None
    per_prompt: tuple[np.ndarray, ...]
    engine: PairAlpha | None = None

    def implied_mu(self, k: int) -> float:
        """Eq. 3 under i.i.d. acceptance at rate `alpha`: (1 − α^(k+1)) / (1 − α)."""
        return implied_mu(self.alpha, k)

    def positional_mu(self, k: int) -> float | None:
        """μ from the per-position rates walked as decoding does (see `positional_mu`)."""
        return positional_mu(self.per_prompt, k)


@dataclass(frozen=True)
class DecodedMeasurement:
    """Tokens emitted per verification by n = 2 decoding at block size `k`: each prompt's run in
    order (`per_prompt`), their mean and standard deviation (ddof = 1) over all `verifications`,
    with bootstrap intervals over prompts."""

    k: int
    per_prompt: tuple[tuple[int, ...], ...]
    mu: float
    sigma: float
    mu_interval: Interval
    sigma_interval: Interval
    verifications: int
    replayed: bool = False  # the runs were replayed from the teacher-forced pass (`replay_counts`), not decoded
    confirmed: bool = False  # the run stopped taking prompts once its interval held the μ the teacher-forced pass implied


def cap_alpha(alpha: float, samples: int) -> float:
    """α capped at 1 − 1/(2·samples): profiles need α < 1, and an empirical rate of 1 over n
    samples is evidence of α ≥ 1 − O(1/n), not of α = 1 (a continuity correction)."""
    return min(alpha, 1.0 - 0.5 / max(samples, 1))


def implied_mu(alpha: float, k: int) -> float:
    """(1 − α^(k+1)) / (1 − α), with the limit k + 1 at α = 1."""
    if alpha >= 1.0:
        return float(k + 1)
    return float((1.0 - alpha ** (k + 1)) / (1.0 - alpha))


def positional_mu(per_prompt: Sequence[np.ndarray], k: int) -> float | None:
    """μ at block size `k` from the per-position rates, walked along each sequence as decoding does.

    A verification starting at position s accepts j drafted tokens with probability
    Π_{t<j} α_(s+t) · (1 − α_(s+j)) (j < k; all k with Π_{t<k} α_(s+t)) and emits j + 1 tokens.
    A dynamic program over s gives each sequence's expected tokens and verifications; μ is their
    ratio over all sequences (a renewal-reward mean). Positions past a sequence's end take its
    mean rate. With greedy 0/1 rates this is exactly the decoded run over the same contexts; unlike
    eq. 3 it keeps how the rate varies and clusters along a sequence. None without positions.
    """
    tokens = verifications = 0.0
    for rates in per_prompt:
        rates = np.asarray(rates, dtype=float)
        length = rates.size
        if length == 0:
            continue
        padded = np.concatenate([rates, np.full(k, rates.mean())])  # (L + k,)
        expected_tokens = np.zeros(length + k + 2)
        expected_verifications = np.zeros(length + k + 2)
        emitted = np.arange(1, k + 2)  # tokens emitted when j = 0..k drafted tokens are accepted
        for s in range(length - 1, -1, -1):
            reach = np.concatenate([[1.0], np.cumprod(padded[s : s + k])])  # P(first j accepted), j = 0..k
            runs = np.append(reach[:k] * (1.0 - padded[s : s + k]), reach[k])  # P(exactly j accepted)
            following = s + emitted
            expected_tokens[s] = runs @ (emitted + expected_tokens[following])
            expected_verifications[s] = 1.0 + runs @ expected_verifications[following]
        tokens += expected_tokens[0]
        verifications += expected_verifications[0]
    return tokens / verifications if verifications > 0 else None


def target_continuations(
    target: ChainMember,
    prompts: Sequence[Sequence[int]],
    *,
    new_tokens: int,
    temperature: float,
    seed: int,
) -> tuple[tuple[int, ...], ...]:
    """The target's own continuation of each prompt: `new_tokens` each, or fewer when the
    target emits one of its EOS ids (`decoder.member.stop_token_ids`: what an instruct model
    writes after its end of turn is not text anyone serves). Prompt i is sampled with a generator
    seeded `seed + i`, so one prompt's continuation does not depend on the others."""
    return tuple(stream.continuation for stream in target_continuations_past(
        target, prompts, new_tokens=new_tokens, temperature=temperature, seed=seed))


@dataclass(frozen=True)
class Continuation:
    """One prompt's `continuation` by the target (`target_continuations`) and, greedy, its `past`:
    the target's greedy tokens after it, EOS or not, where a replayed run's last verification
    drafts (`replay_counts`)."""

    continuation: tuple[int, ...]
    past: tuple[int, ...] = ()
    block: int | None = None  # the block size it was decoded at with ngram-simple drafting (`profiler.stream_drafting`); None: plainly


def target_continuations_past(
    target: ChainMember,
    prompts: Sequence[Sequence[int]],
    *,
    new_tokens: int,
    temperature: float,
    seed: int,
    past: int = 0,
    curve: LatencyCurve | None = None,
    earlier: Sequence[TargetStream] = (),
) -> tuple[Continuation, ...]:
    """`target_continuations`, and when greedy `past` more tokens of each, read on from the cache
    the continuation left: a few target steps, where reading them later would cost a prefill of
    prompt and continuation. Greedy with the target's latency `curve`, each prompt is decoded
    speculatively with prompt lookup at the block size that would have been fastest on the streams
    before it (`earlier` ones, then this call's; `profiler.stream_drafting`): the same tokens,
    sooner where the workload repeats itself."""
    sampling = Sampling(temperature=temperature)
    device = getattr(target, "device", torch.device("cpu"))
    history = list(earlier)
    streams = []
    for index, prompt in enumerate(prompts):
        generator = torch.Generator(device=device).manual_seed(seed + index)
        block = stream_block(history, curve) if curve is not None and sampling.greedy else None
        chain = [target] if block is None else [target, NGramSimpleMember(target.valid_vocab_size, size_n=SIZE_N)]
        result = generate(
            chain, list(prompt), max_new_tokens=new_tokens, block_sizes=() if block is None else (block,), sampling=sampling,
            generator=generator, eos_token_id=stop_token_ids(target),
        )
        more = _greedy_on(target, list(prompt) + list(result.token_ids), past) if past and sampling.greedy else ()
        streams.append(Continuation(tuple(result.token_ids), more, block))
        history.append(TargetStream(len(prompt), tuple(prompt) + tuple(result.token_ids)))
    return tuple(streams)


def _greedy_on(target: ChainMember, ids: Sequence[int], tokens: int) -> tuple[int, ...]:
    """The target's greedy continuation of `ids` by `tokens` tokens, EOS or not, from its cache,
    which holds a prefix of `ids` (as `generate` leaves it)."""
    if tokens < 1:
        return ()
    device = getattr(target, "device", torch.device("cpu"))
    fed = min(target.cache_length, len(ids) - 1)
    target.crop(fed)
    vocab = target.valid_vocab_size

    def argmax(new: list[int]) -> int:
        new_ids = torch.tensor(new, dtype=torch.int64, device=device)
        if isinstance(target, ArgmaxForward):
            return int(target.forward_argmax(new_ids, keep_last=1)[-1])
        return int(argmax_ids(target.forward(new_ids, keep_last=1)[:, :vocab])[-1])

    out: list[int] = []
    pending = list(ids[fed:])
    with torch.inference_mode():
        while len(out) < tokens:
            out.append(argmax(pending))
            pending = out[-1:]
    target.reset()
    return tuple(out)


def own_greedy_read(continuations: Sequence[Sequence[int]]) -> TeacherForced:
    """The target's greedy read of its own greedy `continuations`, without reading them again:
    token j of a continuation was chosen as the target's argmax given everything before it, so
    the argmax at position j *is* token j. A second, teacher-forced read would cost the target a
    prefill and a pass every `TEACHER_FORCING_WIDTH` tokens per prompt (the target's passes are
    the dearest of all) to learn the same tokens, up to where
    a wider pass's numerics flip a near-tie; the decoder's verification is as wide as the chain's
    block, so neither read is its exact numerics. Only the argmax: the target drafts for no one,
    so nothing reads its top probabilities."""
    return TeacherForced(argmax=tuple(torch.tensor(list(c), dtype=torch.int64) for c in continuations), probs=None)


def teacher_forced(
    member: ChainMember,
    prompts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[int]],
    *,
    temperature: float,
    vocab: int,
    width: int = TEACHER_FORCING_WIDTH,
    past: Sequence[Sequence[int]] | None = None,
) -> TeacherForced:
    """`member` over each prompt + continuation, teacher-forced in passes of `width` tokens
    after one pass over the prompt (module docstring). Position j of prompt i is the distribution
    of continuation token j given what precedes it; `vocab`: the chain's common vocabulary size.
    `past` (greedy): tokens after each continuation, read on in the same passes; their argmaxes
    go to `past_argmax`, apart from every statistic of the continuation."""
    return teacher_forced_views(member, prompts, continuations, temperature=temperature, vocab=vocab, width=width, past=past)[0]


def teacher_forced_views(
    member: ChainMember,
    prompts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[int]],
    *,
    temperature: float,
    vocab: int,
    width: int = TEACHER_FORCING_WIDTH,
    past: Sequence[Sequence[int]] | None = None,
    subsets: Sequence[torch.Tensor] = (),
) -> tuple[TeacherForced, ...]:
    """`teacher_forced` of `member`, then one read per id set in `subsets` from the same passes:
    the model whose head covers only those ids (`decoder.llama_cpp_subset.head_subset`) computes
    exactly `member`'s logits there and −inf elsewhere, so its read is `member`'s logits masked to
    them, at no cost of its own."""
    sampling = Sampling(temperature=temperature)
    device = getattr(member, "device", torch.device("cpu"))
    reading_past = past is not None and sampling.greedy
    views = [_ViewRead(sampling, reading_past, None if kept is None else kept[kept < vocab].to(device)) for kept in [None, *subsets]]
    with torch.inference_mode():
        for index, (prompt, continuation) in enumerate(zip(prompts, continuations)):
            member.reset()
            if len(prompt) > 1:
                member.forward(torch.tensor(list(prompt[:-1]), dtype=torch.int64, device=device), keep_last=1)
            after = list(past[index]) if reading_past else []
            ids = [prompt[-1]] + (list(continuation) + after)[:-1]  # position j predicts continuation token j
            logits = torch.cat([
                member.forward(torch.tensor(ids[start:start + width], dtype=torch.int64, device=device),
                               keep_last=len(ids[start:start + width]))
                for start in range(0, len(ids), width)
            ])[:, :vocab]  # (L + len(after), V)
            for view in views:
                view.add(logits, len(continuation))
        member.reset()
    return tuple(view.result() for view in views)


def _masked(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """`logits` (L, V) at `ids`, −inf elsewhere: what a model whose head covers only `ids` computes."""
    masked = torch.full_like(logits, float("-inf"))
    masked[:, ids] = logits[:, ids]
    return masked


class _ViewRead:
    """One model's teacher-forced read, prompt by prompt (`teacher_forced_views`), in `sampling`'s
    mode, with the argmaxes past each continuation where `reading_past`. `keep`: the read of a model
    whose head covers only these ids (ascending): greedy reads only their columns (−inf elsewhere
    adds nothing to a softmax; ties still go to the lowest id), sampled reads the masked
    distribution."""

    def __init__(self, sampling: Sampling, reading_past: bool, keep: torch.Tensor | None) -> None:
        self.sampling, self.reading_past, self.keep = sampling, reading_past, keep
        self.argmaxes, self.probs, self.tops, self.tops10, self.pasts = [], [], [], [], []

    def add(self, logits: torch.Tensor, length: int) -> None:
        """One prompt's logits (L + past, V); the first `length` rows are the continuation's."""
        sampling, keep = self.sampling, self.keep
        if not sampling.greedy:
            self.probs.append(probabilities(logits[:length] if keep is None else _masked(logits[:length], keep), sampling).float().cpu())
            return
        columns = logits if keep is None else logits[:, keep]
        to_vocab = (lambda index: index) if keep is None else (lambda index: keep[index])  # column -> token id
        if self.reading_past:
            self.pasts.append(to_vocab(columns[length:].argmax(dim=-1)).cpu())
        columns = columns[:length]
        self.argmaxes.append(to_vocab(columns.argmax(dim=-1)).cpu())
        self.tops.append(top_probability(columns).cpu())
        self.tops10.append(top_probability(columns, among=DRAFT_SIMPLE_TOP_K).cpu())

    def result(self) -> TeacherForced:
        if self.sampling.greedy:
            return TeacherForced(argmax=tuple(self.argmaxes), probs=None, top=tuple(self.tops), top10=tuple(self.tops10),
                                 past_argmax=tuple(self.pasts) if self.reading_past else None)
        return TeacherForced(argmax=None, probs=tuple(self.probs))


def pair_alpha(
    verifier: TeacherForced,
    drafter: TeacherForced,
    *,
    resamples: int = 1000,
    level: float = 0.95,
    rng: np.random.Generator,
) -> PairAlpha:
    """α_t of the pair at every position (greedy: argmax agreement; else Σ min(p, q)), and the
    engines' rule q_t(argmax p_t) summarised the same way in `engine`."""
    if verifier.argmax is not None and drafter.argmax is not None:
        per_prompt = tuple((v == d).double().numpy() for v, d in zip(verifier.argmax, drafter.argmax))
        engine = per_prompt  # q one-hot: q(argmax p) is argmax agreement
    elif verifier.probs is not None and drafter.probs is not None:
        per_prompt = tuple(torch.minimum(q, p).sum(dim=-1).double().clamp(0.0, 1.0).numpy() for q, p in zip(verifier.probs, drafter.probs))
        engine = tuple(
            q.gather(-1, p.argmax(dim=-1, keepdim=True)).squeeze(-1).double().clamp(0.0, 1.0).numpy()  # (L,)
            for q, p in zip(verifier.probs, drafter.probs)
        )
    else:
        raise ValueError("pair_alpha: verifier and drafter were teacher-forced under different sampling modes")
    summary = _summarise(per_prompt, resamples, level, rng)
    return replace(summary, engine=summary if engine is per_prompt else _summarise(engine, resamples, level, rng))


def _summarise(per_prompt: tuple[np.ndarray, ...], resamples: int, level: float, rng: np.random.Generator) -> PairAlpha:
    """Mean (capped), bootstrap interval over prompts and spread of per-position rates."""
    pooled = np.concatenate(per_prompt)
    raw = float(pooled.mean())
    interval = cluster_bootstrap(per_prompt, np.mean, resamples=resamples, level=level, rng=rng)
    return PairAlpha(
        alpha=cap_alpha(raw, pooled.size),
        raw_alpha=raw,
        samples=int(pooled.size),
        interval=interval,
        std=float(pooled.std()),
        quantiles=quantile_summary(pooled),
        autocorrelation=lag1_autocorrelation(per_prompt),
        per_prompt=per_prompt,
    )


def measure_decoded(
    verifier: ChainMember,
    drafter: ChainMember,
    prompts: Sequence[Sequence[int]],
    *,
    k: int,
    temperature: float,
    settings: AcceptanceSettings,
    rng: np.random.Generator,
    expected: float | None = None,
) -> DecodedMeasurement:
    """Run [verifier, drafter] with block size `k` on the prompts in order; tokens per verification.

    Prompt i uses a generator seeded `settings.seed + i` and stops at `settings.new_tokens` or at
    one of the verifier's EOS ids. The last verification of a prompt counts every token it
    produced, also those past the cut (the decoder's convention), so μ is not biased down by it.
    The run stops taking prompts as `decoded_measurement` says (`expected`: the μ the
    teacher-forced pass implies, which a run confirms and stops at); the bootstrap takes
    `settings.resamples` at `settings.confidence`.
    """
    sampling = Sampling(temperature=temperature)
    device = getattr(verifier, "device", torch.device("cpu"))

    def runs():
        for index, prompt in enumerate(prompts):
            generator = torch.Generator(device=device).manual_seed(settings.seed + index)
            result = generate(
                [verifier, drafter], list(prompt), max_new_tokens=settings.new_tokens, block_sizes=[k], sampling=sampling,
                generator=generator,
                eos_token_id=stop_token_ids(verifier),
            )
            yield result.levels[0].tokens_per_verification

    return decoded_measurement(runs(), k=k, settings=settings, rng=rng, expected=expected)


def decoded_measurement(
    runs: Iterable[Sequence[int]],
    *,
    k: int,
    settings: AcceptanceSettings,
    rng: np.random.Generator,
    expected: float | None = None,
    replayed: bool = False,
) -> DecodedMeasurement:
    """μ, σ and their bootstrap intervals over prompts from each prompt's tokens per verification,
    taken from `runs` in order (a lazy iterable: a prompt not taken is never run).

    Prompts stop being taken once there are `settings.decoded_verifications` verifications from at
    least `settings.decoded_min_prompts` prompts (the settings say why), or, with `expected` given,
    once at least `settings.decoded_min_prompts` prompts give a μ interval that holds `expected`
    (`confirmed`: the run has shown what the teacher-forced pass predicts; the check draws from a
    copy of `rng`, so a run that never confirms gives the entry it gave without the check, and
    one that does reports the interval it stopped on)."""
    enough, min_prompts = settings.decoded_verifications, settings.decoded_min_prompts
    resamples, level = settings.resamples, settings.confidence
    per_prompt: list[tuple[int, ...]] = []
    confirmed = False
    for counts in runs:
        per_prompt.append(tuple(counts))
        if len(per_prompt) < min_prompts:
            continue
        if expected is not None:
            probe = cluster_bootstrap(per_prompt, np.mean, resamples=resamples, level=level, rng=copy.deepcopy(rng))
            if probe.low <= expected <= probe.high:
                confirmed = True
                break
        if enough is not None and sum(map(len, per_prompt)) >= enough:
            break
    pooled = np.concatenate([np.asarray(counts, dtype=float) for counts in per_prompt])
    sigma = _std(pooled)
    return DecodedMeasurement(
        k=k,
        per_prompt=tuple(per_prompt),
        mu=float(pooled.mean()),
        sigma=sigma,
        mu_interval=cluster_bootstrap(per_prompt, np.mean, resamples=resamples, level=level, rng=rng),
        sigma_interval=cluster_bootstrap(per_prompt, _std, resamples=resamples, level=level, rng=rng),
        verifications=int(pooled.size),
        replayed=replayed,
        confirmed=confirmed,
    )


def replay_counts(agree: Sequence[bool], length: int, k: int) -> tuple[int, ...] | None:
    """Tokens per verification of greedy n = 2 decoding at block size `k` with the target
    verifying, replayed along the target's greedy continuation of `length` tokens.

    `agree[j]`: whether the drafter's argmax at position j of that continuation equals the
    target's. Each verification starting at position s accepts drafted tokens while they agree
    (at most `k`; a drafted token is the drafter's argmax on the target's prefix as long as every
    one before it was accepted) and emits them and one token of the target's (the correction, or
    the bonus after a full accept). Verifications go on until one covers position `length` − 1
    (the last token, or the target's EOS), and that one counts every token it produced, as
    `measure_decoded` counts. It can read up to `k` − 1 positions past `length` (along the
    target's greedy continuation past it, EOS or not); None when it needs one `agree` lacks.
    """
    counts, position = [], 0
    while position < length:
        accepted = 0
        while accepted < k:
            if position + accepted >= len(agree):
                return None
            if not agree[position + accepted]:
                break
            accepted += 1
        counts.append(accepted + 1)
        position += accepted + 1
    return tuple(counts)


def _std(values: np.ndarray) -> float:
    return float(values.std(ddof=1)) if values.size > 1 else 0.0
