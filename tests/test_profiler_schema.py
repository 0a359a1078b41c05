"""The profile fields the profiler adds: intervals, implied μ, fingerprints, warnings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import (
    AlphaDistribution,
    DecodedStats,
    ImpliedStats,
    LatencyPoint,
    ModelProfile,
    PrefillPoint,
    Profile,
    SamplingStats,
)
from polyplan.formats.profile_codec import load

EXAMPLE = Path(__file__).resolve().parents[1] / "polyplan" / "data" / "paper_table1_profile.json"


def _full_profile() -> Profile:
    profile = Profile(target="big", device="cpu")
    profile.models.append(
        ModelProfile(
            "big", "fp-big", [LatencyPoint(64, 1, 0.02, 0.001, 9)], [PrefillPoint(64, 0.05, 0.002, 3)], latency_fingerprint="sha256:lat"
        )
    )
    profile.models.append(ModelProfile("small", "fp-small", [LatencyPoint(64, 1, 0.002)]))
    profile.add_pair("big", "small").sampling["greedy"] = SamplingStats(
        alpha=0.7,
        alpha_samples=400,
        alpha_ci=(0.65, 0.74),
        alpha_distribution=AlphaDistribution(0.7, 0.45, {"0.5": 1.0}, 400, autocorrelation=0.2),
        implied=[ImpliedStats(2, 2.19, 2.3), ImpliedStats(4, 2.77)],
        decoded=[DecodedStats(4, 2.9, 1.1, 120, mu_ci=(2.7, 3.1), sigma_ci=(1.0, 1.2), prompts=8, fingerprint="sha256:dec")],
        fingerprint="sha256:alpha",
        warnings=["K=4: decoded mu 2.90 vs 2.77 implied"],
    )
    return profile


def test_new_fields_round_trip(tmp_path):
    profile = _full_profile()
    path = tmp_path / "p.json"
    profile.save(path)
    again = load(path)
    assert again == profile
    stats = again.pairs[0].sampling["greedy"]
    assert stats.alpha_ci == (0.65, 0.74) and stats.decoded[0].mu_ci == (2.7, 3.1)
    assert stats.implied[1].mu_positional is None
    assert again.models[0].latency_fingerprint == "sha256:lat" and again.models[1].latency_fingerprint is None


def test_old_profiles_without_the_new_fields_still_load():
    profile = load(EXAMPLE)
    stats = profile.pairs[0].sampling["greedy"]
    assert stats.alpha_ci is None and stats.implied == [] and stats.warnings == [] and stats.fingerprint is None


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.__setitem__("alpha_ci", [0.8, 0.7]), r"greedy\.alpha_ci: low 0\.8 is above high 0\.7"),
        (lambda s: s.__setitem__("alpha_ci", [0.5, 1.2]), r"greedy\.alpha_ci: must lie within \[0, 1\]"),
        (lambda s: s.__setitem__("alpha_ci", [0.5]), r"greedy\.alpha_ci: must be a \[low, high\] array of two numbers"),
        (lambda s: s["implied"][0].__setitem__("mu", 3.5), r"greedy\.implied\[0\]\.mu: must be in \[1, k \+ 1\] = \[1, 3\]"),
        (lambda s: s["implied"].append({"k": 2, "mu": 2.0}), r"greedy\.implied\[2\]: duplicate entry for k 2"),
        (lambda s: s["implied"][0].__setitem__("extra", 1), r"greedy\.implied\[0\]: unknown field 'extra'"),
        (lambda s: s["decoded"][0].__setitem__("mu_ci", [0.5, 3.0]), r"greedy\.decoded\[0\]\.mu_ci: must lie within \[1, 5\]"),
        (lambda s: s["decoded"][0].__setitem__("sigma_ci", [-1.0, 3.0]), r"greedy\.decoded\[0\]\.sigma_ci: must lie within \[0, inf\]"),
        (lambda s: s["decoded"][0].__setitem__("prompts", 0), r"greedy\.decoded\[0\]\.prompts: must be an integer >= 1"),
        (lambda s: s["decoded"][0].__setitem__("fingerprint", ""), r"greedy\.decoded\[0\]\.fingerprint: must be a non-empty string"),
        (lambda s: s.__setitem__("warnings", ["ok", 3]), r"greedy\.warnings\[1\]: must be a non-empty string"),
        (lambda s: s["alpha_distribution"].__setitem__("autocorrelation", 1.5), r"alpha_distribution\.autocorrelation: must be in \[-1, 1\]"),
    ],
)
def test_bad_new_fields_are_named(tmp_path, mutate, message):
    payload = _full_profile().to_json_dict()
    mutate(payload["pairs"][0]["sampling"]["greedy"])
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(PolyplanError, match=message) as caught:
        load(path)
    assert str(caught.value).startswith(f"{path}: pairs[0].sampling.greedy")


def test_bad_latency_fingerprint_is_named(tmp_path):
    payload = _full_profile().to_json_dict()
    payload["models"][0]["latency_fingerprint"] = 7
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(PolyplanError, match=r"models\[0\]\.latency_fingerprint: must be a non-empty string"):
        load(path)
