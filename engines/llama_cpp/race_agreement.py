"""A draft model's greedy agreement with a race's own answers, for the split
(`engines.llama_cpp.race.priced_on_race`): the draft GGUF teacher-forced through the bindings as
the profiler measures it (`profiler.agreement_runs`), position j agreeing where its argmax is the
answer's token j, which is what llama-server's verification compares.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from polyplan.formats.profile import PairAgreement, Profile, TargetStream


def race_agreement(path: Path, threads: int, target: str, drafter: str, streams: Sequence[TargetStream],
                   log: Callable[[str], None] = lambda line: None) -> PairAgreement:
    """`drafter`'s (the GGUF at `path`) greedy agreement with each of `streams` and its
    confidences, teacher-forced through the bindings at `threads` (module docstring)."""
    from polyplan.decoder.llama_cpp import LlamaCppMember
    from polyplan.profiler.acceptance import teacher_forced
    from polyplan.profiler.agreement_runs import confidence_texts

    log(f"measuring {drafter}'s agreement with the race's {len(streams)} answers ({path.name}, teacher-forced)")
    prompts = [stream.ids[:stream.prompt_tokens] for stream in streams]
    answers = [stream.ids[stream.prompt_tokens:] for stream in streams]
    member = LlamaCppMember(path, threads=threads, context=max(len(stream.ids) for stream in streams) + 8)
    try:
        forced = teacher_forced(member, prompts, answers, temperature=0.0, vocab=member.valid_vocab_size)
    finally:
        member.close()
    strings = tuple("".join("1" if int(guess) == token else "0" for guess, token in zip(argmax.tolist(), answer))
                    for argmax, answer in zip(forced.argmax, answers))
    return PairAgreement(target, drafter, strings, confidence_texts(forced.top), confidence_texts(forced.top10))


def with_race_agreement(profile: Profile, agreement: PairAgreement) -> Profile:
    """`profile` with `agreement` as its pair's greedy agreement and α the share of positions that
    agree (`planner.exact.runs.with_agreement_alphas`)."""
    from polyplan.planner.exact.runs import with_agreement_alphas

    return with_agreement_alphas(profile.with_agreement(agreement), [agreement])
