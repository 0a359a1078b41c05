"""What a JSON file is, told from the keys that mark each of polyplan's files, so that a file
passed where another kind is expected (a plan as `--profile`, a validate report as `--plan`,
unrelated JSON) is one line naming what it is instead of a complaint about its first field."""

from __future__ import annotations

from typing import Any

# kind -> (marker keys, any of which marks it; how a person knows it)
KINDS = {
    "profile": (("schema_version", "models", "pairs"), "a profile (profile.json from polyplan profile)"),
    "plan": (("plan_version",), "a plan (plan.json from polyplan recommend)"),
    "report": (("report_version", "headline", "chains"), "a validation report (from polyplan validate)"),
    "models.yaml": (("candidates",), "a candidates file (models.yaml)"),
}


def foreign_file(payload: Any, expected: str) -> str | None:
    """None when `payload` (a parsed JSON object) can be the `expected` kind; else the problem,
    naming what it is."""
    kind = None
    if isinstance(payload, dict):
        kind = next((kind for kind, (markers, _) in KINDS.items() if any(key in payload for key in markers)), None)
    if kind == expected:
        return None
    wanted = KINDS[expected][1]
    if kind is None:
        return f"is not {wanted}: none of its fields ({', '.join(KINDS[expected][0])}) is there"
    return f"is {KINDS[kind][1]}, not {wanted}"
