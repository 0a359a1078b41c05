"""Whether a member can share a chain with the target: the one vocabulary check, run by the one
loader (`models.loader`) on every candidate it loads and by `profiler.run.profile_models` on the
models it is handed. Two members share a vocabulary when their token-to-id maps are equal
(members without a tokenizer adopt the chain's), their special tokens play the same roles, they
have as many valid entries, and the member returns a logit for every one.
"""

from __future__ import annotations

from polyplan.decoder.member import ChainMember

_SPECIAL_ROLES = ("bos_token", "eos_token", "unk_token", "pad_token")


def incompatibility(member: ChainMember, reference: ChainMember, against: str) -> str | None:
    """Why `member` cannot share a chain with `reference` (None when it can); `against` names the
    reference in the message, e.g. "the target 'vicuna-7b'"."""
    mine, theirs = member.token_map(), reference.token_map()
    if mine is not None and theirs is not None:
        difference = first_difference(theirs, mine)
        if difference is not None:
            return f"tokenizer differs from {against}: {difference}"
    specials, expected = special_tokens(member), special_tokens(reference)
    if specials is not None and expected is not None and specials != expected:
        role = next(r for r in sorted(set(specials) | set(expected)) if specials.get(r) != expected.get(r))
        return f"special token {role} is {specials.get(role)!r}, {against} has {expected.get(role)!r}"
    vocab = reference.valid_vocab_size
    if member.valid_vocab_size != vocab:
        return f"vocabulary of {member.valid_vocab_size} tokens differs from {against} ({vocab})"
    if member.vocab_size < vocab:
        return f"returns {member.vocab_size} logits, fewer than the {vocab}-token vocabulary"
    return None


def special_tokens(member: ChainMember) -> dict[str, tuple[str, int]] | None:
    """Special-token role → (token, id) of a member's tokenizer, e.g. {'eos_token': ('</s>', 2)};
    None for a member without a tokenizer."""
    tokenizer = getattr(member, "tokenizer", None)
    if tokenizer is None:
        return None
    result = {}
    for role in _SPECIAL_ROLES:
        token = getattr(tokenizer, role, None)
        if token is not None:
            result[role] = (str(token), tokenizer.convert_tokens_to_ids(str(token)))
    return result


def first_difference(reference: dict[str, int], other: dict[str, int]) -> str | None:
    """Describe the first token whose id differs between two token-to-id maps (None if equal)."""
    if reference is other or reference == other:  # the target against itself: no walk over its map
        return None
    for token, index in sorted(reference.items(), key=lambda item: item[1]):  # lowest id first
        if other.get(token) != index:
            return f"token {token!r} has id {index} there but {other.get(token)} here"
    extra = next(token for token in other if token not in reference)
    return f"token {extra!r} (id {other[extra]}) is missing there"
