"""One reader for every JSON or YAML file a user hands polyplan: whatever is wrong with the file
(missing, a folder, not UTF-8, not valid JSON or YAML, a repeated YAML key, nesting deeper than any
polyplan format) is one `PolyplanError` naming it, never a traceback; each format's schema checks
come after, on the parsed value.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from polyplan.formats.errors import PolyplanError

_MAX_DEPTH = 64  # no polyplan format nests deeper than ~10; deeper input is hostile or broken


def _read_text_file(path: str | os.PathLike[str], what: str = "file") -> str:
    """The UTF-8 text of `path`; `PolyplanError` naming it when it cannot be read as text."""
    label = str(path)
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolyplanError(f"{label}: no such {what}") from None
    except IsADirectoryError:
        raise PolyplanError(f"{label}: is a folder, not a {what}") from None
    except UnicodeDecodeError as error:
        raise PolyplanError(f"{label}: not UTF-8 text (byte {error.start}: {error.reason})") from None
    except OSError as error:
        raise PolyplanError(f"{label}: cannot read ({error.strerror or error})") from None


def parse_json_text(text: str, label: str) -> Any:
    """The JSON value of `text` (from the file `label`), nesting checked."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise PolyplanError(f"{label}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})") from None
    except ValueError as error:  # e.g. an integer longer than Python's int-string limit (4300 digits)
        raise PolyplanError(f"{label}: not valid JSON ({error})") from None
    except RecursionError:
        raise PolyplanError(f"{label}: nested too deeply (more than {_MAX_DEPTH} levels)") from None
    _check_depth(value, label)
    return value


def read_json_file(path: str | os.PathLike[str], what: str = "file") -> Any:
    """The parsed JSON of `path`."""
    return parse_json_text(_read_text_file(path, what), str(path))


def read_yaml_file(path: str | os.PathLike[str], what: str = "file") -> Any:
    """The parsed YAML of `path`; a mapping that repeats a key is refused (PyYAML would keep
    the last value silently)."""
    return _parse_yaml_text(_read_text_file(path, what), str(path))


def _parse_yaml_text(text: str, label: str) -> Any:
    """The YAML value of `text` (from the file `label`), duplicate keys and nesting checked."""
    import yaml

    try:
        value = yaml.load(text, Loader=_strict_loader())  # noqa: S506 (a SafeLoader subclass)
    except _DuplicateKey as error:
        raise PolyplanError(f"{label}: {error}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None)
        raise PolyplanError(f"{label}: not valid YAML{where}" + (f" ({problem})" if problem else "")) from None
    except RecursionError:
        raise PolyplanError(f"{label}: nested too deeply (more than {_MAX_DEPTH} levels)") from None
    _check_depth(value, label)
    return value


def _check_depth(value: Any, label: str, limit: int = _MAX_DEPTH) -> None:
    """Refuse a value nested deeper than `limit` (checked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, (list, tuple)):
            children = list(item)
        else:
            continue
        if depth > limit:
            raise PolyplanError(f"{label}: nested too deeply (more than {limit} levels)")
        stack.extend((child, depth + 1) for child in children)


class _DuplicateKey(Exception):
    pass


def _strict_loader():
    """A SafeLoader whose mappings refuse a repeated key (built on first use: nothing at import)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    repeated = key in seen
                    seen.add(key)
                except TypeError:
                    continue  # an unhashable key: SafeLoader reports it itself
                if repeated:
                    raise _DuplicateKey(f"line {key_node.start_mark.line + 1}: duplicate key {key!r}")
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def is_finite_number(value: Any) -> bool:
    """Whether a parsed JSON/YAML value is a finite number (not a bool; an integer too large
    for a float, such as 10^400, is not finite either)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
