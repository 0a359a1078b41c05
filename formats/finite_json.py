"""JSON has no NaN or infinity: the files polyplan writes say null instead (strict JSON)."""

from __future__ import annotations

import math
from typing import Any


def json_safe(payload: Any) -> Any:
    """`payload` with every NaN or infinity replaced by None, at any depth of dicts and lists."""
    if isinstance(payload, float) and not math.isfinite(payload):
        return None
    if isinstance(payload, dict):
        return {key: json_safe(item) for key, item in payload.items()}
    if isinstance(payload, (list, tuple)):
        return [json_safe(item) for item in payload]
    return payload
