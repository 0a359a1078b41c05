"""Measure acceptance runs: the greedy agreement sequence of every profiled pair.

The target continues each prompt greedily and every other model makes one teacher-forced pass
over prompt + continuation (`profiler.acceptance`); the target's argmax at position t is token t
of its own continuation (`own_greedy_read`). Position t of pair (verifier, drafter) agrees when
their argmaxes are equal. The sequences go into the profile's `acceptance_runs["greedy"]` with a
fingerprint, so a rerun with nothing changed reuses them, and `planner.exact.runs` turns them into
the run-length law the exact model uses. For each model drafter under the target the same pass
also keeps its top probability at every position, over the whole vocabulary (what a confidence
stop is planned on, `planner.exact.policy_replay`) and over its 10 best logits (what llama-server's
`--spec-draft-p-min` compares, `planner.llama_cpp.policy`); and the target's streams, on which
`planner.exact.ngram_replay` replays an engine's n-gram drafter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from polyplan.decoder.member import BlockDrafter
from polyplan.formats.profile import AgreementRuns, PairAgreement, Profile, TargetStream, confidence_text
from polyplan.profiler.acceptance import TEACHER_FORCING_WIDTH, GreedyReads, own_greedy_read, target_continuations, teacher_forced
from polyplan.models.hashing import fingerprint_settings, fingerprint_tokens


def runs_fingerprint(models: Sequence, prompts: Sequence[Sequence[int]], new_tokens: int, seed: int) -> str:
    """Fingerprint of what the agreement sequences are measured from."""
    return fingerprint_settings(
        "agreement-runs", [(model.name, model.fingerprint) for model in models], fingerprint_tokens(prompts), new_tokens, seed,
        {"teacher_forcing_width": TEACHER_FORCING_WIDTH},
    )


def measure_agreement(
    models: Sequence, pairs: Sequence[tuple[str, str]], prompts: Sequence[Sequence[int]], *, new_tokens: int, seed: int,
    reads: GreedyReads | None = None,
) -> AgreementRuns:
    """The greedy agreement strings of every (verifier, drafter) pair of names (module docstring);
    `models`: `models.fingerprints.ProfiledModel`s, the target first; `prompts`: token ids.
    `reads`: what a profiling run's greedy phase already read (`profiler.run.ProfileOutcome.greedy`);
    used where it is of the same prompts, `new_tokens` and `seed` (the same entry, without
    generating or reading again), a model it lacks read here."""
    target = models[0].member
    vocab = target.valid_vocab_size
    usable = reads is not None and reads.fits(prompts, new_tokens, seed)
    if usable:
        continuations = reads.continuations
    else:
        continuations = target_continuations(target, prompts, new_tokens=new_tokens, temperature=0.0, seed=seed)
    needed = {name for pair in pairs for name in pair}
    forced = {
        model.name: own_greedy_read(continuations) if model is models[0]
        else reads.forced[model.name] if usable and model.name in reads.forced
        else teacher_forced(model.member, prompts, continuations, temperature=0.0, vocab=vocab)
        for model in models
        if model.name in needed
    }
    argmax = {name: result.argmax for name, result in forced.items()}
    rules = {model.name for model in models if isinstance(model.member, BlockDrafter)}
    entries = []
    for verifier, drafter in pairs:
        strings = ["".join("1" if same else "0" for same in (argmax[verifier][i] == argmax[drafter][i]).tolist()) for i in range(len(prompts))]
        kept = verifier == models[0].name and drafter not in rules
        entries.append(PairAgreement(verifier, drafter, tuple(strings), confidence_texts(forced[drafter].top) if kept else (),
                                     confidence_texts(forced[drafter].top10) if kept else ()))
    streams = tuple(TargetStream(len(prompt), tuple(prompt) + tuple(continuation))
                    for prompt, continuation in zip(prompts, continuations) if len(prompt) > 0)
    return AgreementRuns(tuple(entries), runs_fingerprint(models, prompts, new_tokens, seed), len(prompts), new_tokens, streams)


def confidence_texts(tops) -> tuple[str, ...]:
    """Per prompt, top probabilities as the profile keeps them (none: empty)."""
    return () if tops is None else tuple(confidence_text(values.tolist()) for values in tops)


def ensure_agreement(
    profile: Profile, previous: AgreementRuns | None, models: Sequence, prompts: Sequence[Sequence[int]], *, new_tokens: int, seed: int,
    reads: GreedyReads | None = None,
) -> tuple[Profile, bool]:
    """`profile` with the greedy agreement sequences in `acceptance_runs`, reusing `previous` (the
    entry before this run) when its fingerprint matches and it holds the target's streams and both
    confidences of the model drafters under the target (older profiles lack some); and whether
    they were measured (from `reads` where they fit, `measure_agreement`)."""
    loaded = {model.name for model in models}  # a profile keeps other models' pairs; only these can run
    pairs = [(pair.verifier, pair.drafter) for pair in profile.pairs
             if "greedy" in pair.sampling and {pair.verifier, pair.drafter} <= loaded]
    key = runs_fingerprint(models, prompts, new_tokens, seed)
    wanted = set(pairs)
    rules = {model.name for model in models if isinstance(model.member, BlockDrafter)}
    confident = (set(previous.confidences_by_pair()) & set(previous.confidences_by_pair(top10=True))
                 if previous is not None else set())
    lacking = {pair for pair in wanted if pair[0] == models[0].name and pair[1] not in rules} - confident
    if previous is not None and previous.fingerprint == key and set(previous.by_pair()) >= wanted and previous.streams and not lacking:
        entry, measured = previous, False
    else:
        entry, measured = measure_agreement(models, pairs, prompts, new_tokens=new_tokens, seed=seed, reads=reads), True
    return replace(profile, acceptance_runs={**profile.acceptance_runs, "greedy": entry}), measured
