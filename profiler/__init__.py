"""polyplan.profiler: latency curves T_i(k) and pairwise acceptance statistics, resumably.

    from polyplan.profiler import ProfiledModel, profile_models, builtin_prompts, encode_prompts
    prompts = encode_prompts(builtin_prompts(), tokenizer)
    outcome = profile_models([ProfiledModel("target", target_member, fp1), ...], prompts, "profile.json")

`forward_timing` times T_i(k), `acceptance` measures α and decoded μ, `prompts` reads prompt sets,
`run` is the resumable run and `summary` its closing table. The pipeline above this room
(`pipeline.stages.profile_candidates`) adds what the exact model reads besides (`pipeline.loop_costs`).
"""

from polyplan.profiler.acceptance import DecodedMeasurement, PairAlpha, implied_mu, measure_decoded, pair_alpha
from polyplan.models.hashing import fingerprint_files, fingerprint_module, fingerprint_settings
from polyplan.profiler.forward_timing import LatencyMeasurement, LatencySettings, measure_latency
from polyplan.profiler.prompts import EncodedPrompt, Prompt, builtin_prompts, encode_prompts, read_prompt_file
from polyplan.profiler.settings import AcceptanceSettings, ProfileSettings
from polyplan.models.fingerprints import ProfiledModel
from polyplan.profiler.run import ProfileOutcome, Progress, Step, profile_models
from polyplan.profiler.summary import summary_lines

__all__ = [
    "AcceptanceSettings",
    "DecodedMeasurement",
    "EncodedPrompt",
    "LatencyMeasurement",
    "LatencySettings",
    "PairAlpha",
    "ProfileOutcome",
    "ProfileSettings",
    "ProfiledModel",
    "Progress",
    "Prompt",
    "Step",
    "builtin_prompts",
    "encode_prompts",
    "fingerprint_files",
    "fingerprint_module",
    "fingerprint_settings",
    "implied_mu",
    "measure_decoded",
    "measure_latency",
    "pair_alpha",
    "profile_models",
    "read_prompt_file",
    "summary_lines",
]
