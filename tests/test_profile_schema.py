"""The profile JSON schema: round trip, atomic save, and one clear error per bad field."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import (
    DecodedStats,
    LatencyPoint,
    ModelProfile,
    Profile,
    SamplingStats,
)
from polyplan.formats.profile_codec import load
from polyplan.formats.sampling import SamplingMode

EXAMPLE = Path(__file__).resolve().parents[1] / "polyplan" / "data" / "paper_table1_profile.json"


def _example_payload() -> dict:
    return json.loads(EXAMPLE.read_text())


def _write(tmp_path: Path, payload: dict, name: str = "profile.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(payload))
    return path


def test_example_profile_loads_with_table1_numbers():
    profile = load(EXAMPLE)
    assert profile.target == "vicuna-7b"
    assert [m.latency[0].median_s for m in profile.models] == [0.025, 0.007, 0.004]
    mus = {(p.verifier, p.drafter): p.sampling["greedy"].decoded[0].mu for p in profile.pairs}
    assert mus == {
        ("vicuna-7b", "vicuna-7b-w4"): 6.26,
        ("vicuna-7b", "eagle"): 4.34,
        ("vicuna-7b-w4", "eagle"): 4.36,
    }


def test_the_shipped_profile_is_the_one_copy_and_resources_reads_it():
    from conftest import shipped_paper_profile

    assert shipped_paper_profile().read_bytes() == EXAMPLE.read_bytes()
    assert not (Path(__file__).resolve().parents[1] / "examples" / "paper_table1_profile.json").exists()


def test_build_field_by_field_save_and_reload(tmp_path):
    profile = Profile(target="big", device="cpu")
    profile.models.append(ModelProfile(name="big", fingerprint="fp-big"))
    profile.models[0].latency.append(LatencyPoint(context_length=64, k=1, median_s=0.02, iqr_s=0.001, repeats=9))
    profile.models.append(ModelProfile(name="small", fingerprint="fp-small", latency=[LatencyPoint(64, 1, 0.002)]))
    pair = profile.add_pair("big", "small")
    assert profile.add_pair("big", "small") is pair
    pair.sampling[SamplingMode(0.0).key] = SamplingStats(alpha=0.7, decoded=[DecodedStats(k=4, mu=2.9, sigma=1.1, samples=50)])
    pair.sampling[SamplingMode(1.0).key] = SamplingStats(alpha=0.6)
    path = tmp_path / "p.json"
    profile.save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]  # the temporary file was renamed
    again = load(path)
    assert again == profile
    assert set(again.pairs[0].sampling) == {"greedy", "t1.0"}


def test_save_refuses_an_invalid_profile_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "p.json"
    profile = load(EXAMPLE)
    profile.save(path)
    before = path.read_text()
    profile.pairs[0].sampling["greedy"].alpha = 1.5
    with pytest.raises(PolyplanError, match=r"pairs\[0\]\.sampling\.greedy\.alpha: must be in \[0, 1\)"):
        profile.save(path)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]


def test_sampling_keys():
    assert SamplingMode(0).key == "greedy"
    assert SamplingMode(1.0).key == "t1.0"
    assert SamplingMode(0.7).key == "t0.7"
    with pytest.raises(PolyplanError, match="temperature"):
        SamplingMode(-1)


def test_sampling_temperature_reverses_the_key():
    for temperature in (0.0, 0.7, 1.0):
        assert SamplingMode.parse(SamplingMode(temperature).key).temperature == temperature
    for bad in ("x0.7", "tabc", "", "t0", "t-1", "tnan", "tinf"):
        with pytest.raises(PolyplanError, match="neither 'greedy'"):
            SamplingMode.parse(bad)
    assert SamplingMode.parse("greedy").greedy and not SamplingMode.parse("t0.7").greedy


def _mutate(payload: dict, path: str, value) -> dict:
    target = payload
    keys = path.split("/")
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    last = keys[-1]
    if value is _DELETE:
        del target[last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return payload


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("pairs/2/sampling/greedy/alpha", 1.3, "profile.json: pairs[2].sampling.greedy.alpha: must be in [0, 1), got 1.3"),
        ("pairs/0/sampling/greedy/alpha", -0.1, "pairs[0].sampling.greedy.alpha: must be in [0, 1), got -0.1"),
        ("pairs/0/sampling/greedy/alpha", 1.0, "pairs[0].sampling.greedy.alpha: must be in [0, 1), got 1"),
        ("models/1/latency/0/median_s", -0.007, "models[1].latency[0].median_s: must be > 0, got -0.007"),
        ("models/1/latency/0/median_s", 0, "models[1].latency[0].median_s: must be > 0, got 0"),
        ("models/0/latency/0/k", 0, "models[0].latency[0].k: must be an integer >= 1, got 0"),
        ("pairs/0/sampling/greedy/decoded/0/k", 0, "decoded[0].k: must be an integer >= 1, got 0"),
        ("pairs/0/sampling/greedy/decoded/0/mu", 9.0, "decoded[0].mu: must be in [1, k + 1] = [1, 8], got 9"),
        ("schema_version", 3, "schema_version: unsupported version 3; this polyplan reads version 2"),
        ("schema_version", _DELETE, "schema_version: unsupported version null"),
        ("target", "llama", "target: 'llama' is not one of the models"),
        ("models/0/fingerprint", "", "models[0].fingerprint: must be a non-empty string"),
        ("models/0/latncy", [], "models[0]: unknown field 'latncy'"),
        ("pairs/1/drafter", "nobody", "pairs[1].drafter: 'nobody' is not one of the models"),
        ("pairs/0/sampling/t-hot", {"alpha": 0.5}, "pairs[0].sampling: key 't-hot' is neither"),
        ("models/2/name", "vicuna-7b", "models[2].name: duplicate model name 'vicuna-7b'"),
        ("models/0/latency/0/median_s", True, "models[0].latency[0].median_s: must be a number, got a boolean"),
    ],
)
def test_bad_field_is_named(tmp_path, path, value, message):
    bad = _write(tmp_path, _mutate(_example_payload(), path, value))
    with pytest.raises(PolyplanError) as caught:
        load(bad)
    text = str(caught.value)
    assert message in text
    assert "\n" not in text
    assert text.startswith(str(bad))


def test_nan_in_the_json_is_rejected_with_its_field(tmp_path):
    text = EXAMPLE.read_text().replace('"alpha": 0.813996', '"alpha": NaN')
    path = tmp_path / "profile.json"
    path.write_text(text)
    with pytest.raises(PolyplanError, match=r"pairs\[1\]\.sampling\.greedy\.alpha: must be a finite number, got NaN"):
        load(path)
    path.write_text(EXAMPLE.read_text().replace('"median_s": 0.025', '"median_s": Infinity'))
    with pytest.raises(PolyplanError, match=r"models\[0\]\.latency\[0\]\.median_s: must be a finite number"):
        load(path)


def test_unreadable_inputs(tmp_path):
    with pytest.raises(PolyplanError, match="no such file"):
        load(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{\"schema_version\": 1,")
    with pytest.raises(PolyplanError, match=r"broken.json: not valid JSON \(line 1"):
        load(broken)
    array = tmp_path / "array.json"
    array.write_text("[]")
    with pytest.raises(PolyplanError, match="must hold one JSON object"):
        load(array)


def test_optional_distribution_fields_validate(tmp_path):
    payload = _example_payload()
    payload["pairs"][0]["sampling"]["greedy"]["alpha_distribution"] = {
        "mean": 0.93, "std": 0.2, "samples": 100, "quantiles": {"0.5": 1.0, "0.1": 0.4}
    }
    profile = load(_write(tmp_path, payload))
    spread = profile.pairs[0].sampling["greedy"].alpha_distribution
    assert spread is not None and spread.quantiles == {"0.5": 1.0, "0.1": 0.4}
    payload["pairs"][0]["sampling"]["greedy"]["alpha_distribution"]["quantiles"] = {"median": 1.0}
    with pytest.raises(PolyplanError, match=r"alpha_distribution\.quantiles: key 'median' is not a probability"):
        load(_write(tmp_path, payload))
    assert math.isfinite(profile.pairs[0].sampling["greedy"].alpha)
