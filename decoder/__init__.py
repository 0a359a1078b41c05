"""The n-level lossless speculative decoding chain and the members that can sit in it.

    from polyplan.decoder import HFMember, Sampling, generate
    result = generate([HFMember(target), HFMember(draft)], prompt_ids, max_new_tokens=64,
                      block_sizes=[4], sampling=Sampling(temperature=0.0))
    result.token_ids, result.levels[0].tokens_per_verification
"""

from polyplan.decoder.chain import generate
from polyplan.decoder.hf import HFMember
from polyplan.decoder.member import ArgmaxForward, BlockDrafter, ChainMember
from polyplan.decoder.ngram import NGramMember
from polyplan.decoder.ngram_simple import NGramSimpleMember
from polyplan.decoder.result import GenerationResult, LevelStats
from polyplan.decoder.sampling import Sampling

__all__ = [
    "ArgmaxForward",
    "BlockDrafter",
    "ChainMember",
    "GenerationResult",
    "HFMember",
    "LevelStats",
    "NGramMember",
    "NGramSimpleMember",
    "Sampling",
    "generate",
]
