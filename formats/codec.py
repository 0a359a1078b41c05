"""The one JSON codec of polyplan's files (profile.json, plan.json, report.json): a record is a
frozen dataclass whose fields are the file's keys, in field order, and whose field types are the
schema; `encode` and `decode` walk them. How each type maps to JSON, where checks go and why an
unknown key is an error: docs/design.md, "The file codec". Every failure is one `PolyplanError`
line ``label: field.path: problem``. A whole file is a `FileFormat`; each file module wraps
`read_file`, `write_file`, `decode_file` and `encode_file` as `read_X`, `write_X`, `decode_X` and
`encode_X`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from polyplan.formats.atomic import write_text_atomically
from polyplan.formats.errors import PolyplanError
from polyplan.formats.inputs import read_json_file
from polyplan.formats.kinds import foreign_file

_MAX_INTEGER = 2**53  # integers beyond it lose precision as floats (and 10^400 overflows one)

NEVER, NONE, EMPTY = "never", "none", "empty"  # when a field is left out of the file (`spec`'s omit)


class Invalid(Exception):
    """What a check found wrong: `problem`, `at` a path below the checked value ("", ".k", "[2]")."""

    def __init__(self, problem: str, at: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.at = at


@dataclass(frozen=True)
class Before:
    """A step on a value's raw JSON before it is decoded: it returns the JSON to decode (e.g. one
    number read as a list of one), or raises `Invalid` for what an older file holds instead."""

    step: Callable[[Any], Any]


@dataclass(frozen=True)
class Layout:
    """What a record says about itself beyond its fields: when its fields are left out of the file
    (`NEVER`: null where None; `NONE`: when None; `EMPTY`: when None, False or empty), the checks
    that span its fields (raising `Invalid` whose `at` names the field), and whether it is written
    as its one field's value alone (`transparent`)."""

    omit: str = NEVER
    checks: tuple[Callable[[Any], None], ...] = ()
    transparent: bool = False


_PLAIN = Layout()


def spec(*checks: Any, default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING, key: str | None = None,
         omit: str | None = None) -> Any:
    """A record's field with its checks (and `Before` steps), its JSON key when it is not the
    field's name, and when it is left out of the file (None: the record's `Layout.omit`)."""
    return dataclasses.field(default=default, default_factory=factory, metadata={"checks": checks, "key": key, "omit": omit})


def local(default: Any) -> Any:
    """A field that is not in the file (e.g. where a record was read from, for messages)."""
    return dataclasses.field(default=default, compare=False, repr=False, metadata={"local": True})


@dataclass(frozen=True)
class _Field:
    name: str
    key: str
    kind: Any
    checks: tuple[Any, ...]
    omit: str
    required: bool


@functools.cache
def _fields(cls: type) -> tuple[_Field, ...]:
    """A record's stored fields: name, JSON key, type (annotations are strings under
    `from __future__ import annotations`), checks, omission and whether required."""
    hints = typing.get_type_hints(cls, include_extras=True)
    layout = _layout(cls)
    found = []
    for item in dataclasses.fields(cls):
        if item.metadata.get("local"):
            continue
        required = item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING
        found.append(_Field(item.name, item.metadata.get("key") or item.name, hints[item.name], tuple(item.metadata.get("checks", ())),
                            item.metadata.get("omit") or layout.omit, required))
    return tuple(found)


def _layout(cls: type) -> Layout:
    layout = cls.__dict__.get("layout", _PLAIN)
    return layout if isinstance(layout, Layout) else _PLAIN


def encode(value: Any) -> Any:
    """The JSON value of a record (an object, its keys in field order), or of anything a
    record's field holds."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = _fields(type(value))
        if _layout(type(value)).transparent:
            return encode(getattr(value, fields[0].name))
        entry = {}
        for field in fields:
            item = getattr(value, field.name)
            if not _left_out(item, field.omit):
                entry[field.key] = encode(item)
        return entry
    if isinstance(value, Mapping):
        return {key: encode(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _left_out(value: Any, omit: str) -> bool:
    if omit == NONE:
        return value is None
    if omit == EMPTY:
        return value is None or value is False or (isinstance(value, (list, tuple, Mapping)) and not value)
    return False


def decode(cls: type, payload: Any, label: str = "JSON", where: str = "") -> Any:
    """The record `cls` from its parsed JSON object; `PolyplanError` ``label: field.path: problem``."""
    return _Decoder(label).value(cls, payload, where)


class _Decoder:
    """Builds records from their field types; each failure is one line `label: field.path: problem`."""

    def __init__(self, label: str) -> None:
        self.label = label

    def fail(self, where: str, problem: str) -> typing.NoReturn:
        raise PolyplanError(f"{self.label}: {where}: {problem}" if where else f"{self.label}: {problem}")

    def value(self, kind: Any, value: Any, where: str, checks: tuple[Any, ...] = ()) -> Any:
        if typing.get_origin(kind) is Annotated:
            return self.value(kind.__origin__, value, where, kind.__metadata__ + checks)
        for check in checks:
            if isinstance(check, Before) and value is not None:
                try:
                    value = check.step(value)
                except Invalid as invalid:
                    self.fail(_below(where, invalid.at), invalid.problem)
        decoded = self.typed(kind, value, where)
        if decoded is None:
            return None
        for check in checks:
            if isinstance(check, Before):
                continue
            try:
                replaced = check(decoded)
            except Invalid as invalid:
                self.fail(_below(where, invalid.at), invalid.problem)
            if replaced is not None:
                decoded = replaced
        return decoded

    def typed(self, kind: Any, value: Any, where: str) -> Any:
        origin, arguments = typing.get_origin(kind), typing.get_args(kind)
        if origin in (typing.Union, types.UnionType):
            if value is None and type(None) in arguments:
                return None
            (inner,) = [argument for argument in arguments if argument is not type(None)]
            return self.value(inner, value, where)
        if kind is Any:
            self.finite_everywhere(value, where)
            return value
        if value is None:
            self.fail(where, f"must not be null (expected {_expected(kind)})")
        if dataclasses.is_dataclass(kind):
            return self.record(kind, value, where)
        if origin is tuple:
            if not isinstance(value, list):
                self.fail(where, f"must be a JSON array, got {_kind_of(value)}")
            if len(arguments) == 2 and arguments[1] is Ellipsis:
                return tuple(self.value(arguments[0], item, f"{where}[{index}]") for index, item in enumerate(value))
            if len(value) != len(arguments):
                self.fail(where, f"must be an array of {len(arguments)}, got {len(value)} items")
            return tuple(self.value(argument, item, f"{where}[{index}]") for index, (argument, item) in enumerate(zip(arguments, value)))
        if origin in (Mapping, dict):
            if not isinstance(value, dict):
                self.fail(where, f"must be a JSON object, got {_kind_of(value)}")
            keys = [self.value(arguments[0], key, where) for key in value]
            return {key: self.value(arguments[1], item, join(where, str(raw))) for key, (raw, item) in zip(keys, value.items())}
        if kind is bool:
            if not isinstance(value, bool):
                self.fail(where, f"must be true or false, got {_kind_of(value)}")
            return value
        if kind is int:
            return self.integer(value, where)
        if kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self.fail(where, f"must be a number, got {_kind_of(value)}")
            if isinstance(value, int) and abs(value) > _MAX_INTEGER:
                self.fail(where, f"must be a finite number, got an integer of {len(str(abs(value)))} digits")
            self.finite_everywhere(value, where)
            return float(value)
        if kind is str:
            if not isinstance(value, str):
                self.fail(where, f"must be a string, got {_kind_of(value)}")
            return value
        raise TypeError(f"the codec has no rule for {kind!r} ({where})")  # a field type the codec does not know

    def integer(self, value: Any, where: str) -> int:
        """An integer (an integral float, such as 64.0, reads as one)."""
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(where, f"must be an integer, got {_kind_of(value)}")
        if abs(value) > _MAX_INTEGER:
            self.fail(where, f"must be an integer of at most 2^53, got one of {len(str(abs(value)))} digits")
        return value

    def record(self, cls: type, value: Any, where: str) -> Any:
        fields, layout = _fields(cls), _layout(cls)
        if layout.transparent:
            (field,) = fields
            built = self.construct(cls, {field.name: self.value(field.kind, value, where, field.checks)}, where)
        else:
            if not isinstance(value, dict):
                self.fail(where, f"must be a JSON object, got {_kind_of(value)}")
            keys = {field.key for field in fields}
            for key in value:
                if key not in keys:
                    self.fail(join(where, str(key)), f"unknown field (allowed: {', '.join(sorted(keys))})")
            for field in fields:  # a field with a default came later: older files lack it
                if field.required and field.key not in value:
                    self.fail(join(where, field.key), "missing")
            built = self.construct(cls, {
                field.name: self.value(field.kind, value[field.key], join(where, field.key), field.checks)
                for field in fields if field.key in value
            }, where)
        for check in layout.checks:
            try:
                check(built)
            except Invalid as invalid:
                self.fail(_below(where, invalid.at), invalid.problem)
        return built

    def construct(self, cls: type, values: dict[str, Any], where: str) -> Any:
        try:
            return cls(**values)
        except PolyplanError as error:  # a record's own invariant (__post_init__)
            self.fail(where, str(error))

    def finite_everywhere(self, value: Any, where: str) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(where, f"must be a finite number, got {value!r}".replace("nan", "NaN"))
        if isinstance(value, dict):
            for key, item in value.items():
                self.finite_everywhere(item, join(where, str(key)))
        if isinstance(value, list):
            for index, item in enumerate(value):
                self.finite_everywhere(item, f"{where}[{index}]")


@dataclass(frozen=True)
class FileFormat:
    """A polyplan file: its kind (a `formats.kinds` key), record, version key and number, a
    migration per older version (`migrate(payload, label)` gives the current version's object),
    and what to do about a version this polyplan does not read."""

    kind: str
    record: type
    version_key: str
    version: int
    migrations: Mapping[int, Callable[[dict[str, Any], str], dict[str, Any]]]
    advice: str


def encode_file(form: FileFormat, record: Any) -> dict[str, Any]:
    """The file's JSON object: its version first, then the record's keys."""
    return {form.version_key: form.version, **encode(record)}


def decode_file(form: FileFormat, payload: Any, label: str) -> Any:
    """The record of a parsed file (errors name `label`): checked for its kind and version,
    migrated from an older version."""
    if not isinstance(payload, dict):
        raise PolyplanError(f"{label}: must hold one JSON object, got {_kind_of(payload)}")
    foreign = foreign_file(payload, form.kind)
    if foreign is not None:
        raise PolyplanError(f"{label}: {foreign}")
    version = payload.get(form.version_key)
    migrate = next((step for old, step in form.migrations.items() if version == old and not isinstance(version, bool)), None)
    if migrate is not None:
        payload = migrate(payload, label)
        version = payload.get(form.version_key)
    if version != form.version or isinstance(version, bool):
        found = "missing" if form.version_key not in payload else f"unsupported version {show(version)}"
        older = "".join(f" (and migrates version {old})" for old in sorted(form.migrations))
        raise PolyplanError(f"{label}: {form.version_key}: {found}; this polyplan reads version {form.version}{older} ({form.advice})")
    body = {key: value for key, value in payload.items() if key != form.version_key}
    return decode(form.record, body, label)


def read_file(form: FileFormat, path: str | os.PathLike[str]) -> Any:
    """Read and check a file; `PolyplanError` naming the file and the field on any problem."""
    return decode_file(form, read_json_file(path, "file"), str(path))


def json_text(payload: Any) -> str:
    """A file's text: the object indented by two, one newline at the end."""
    return json.dumps(payload, indent=2, allow_nan=False) + "\n"


def write_file(form: FileFormat, record: Any, path: str | os.PathLike[str]) -> None:
    """Write a file atomically (temporary file in the same folder, then os.replace)."""
    write_text_atomically(path, json_text(encode_file(form, record)))


def join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _below(where: str, at: str) -> str:
    """The path `at` (".k", "[2]", "") below `where`."""
    return (where + at) if where else at.removeprefix(".")


def _kind_of(value: Any) -> str:
    """How a message names a JSON value's kind ("an object", "a string", "the number 3")."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), f"the number {value!r}" if isinstance(value, (int, float)) else type(value).__name__)


def show(value: Any) -> str:
    """A value as a message quotes it (null for None)."""
    return "null" if value is None else repr(value)


def _expected(kind: Any) -> str:
    if typing.get_origin(kind) is Annotated:
        return _expected(kind.__origin__)
    if dataclasses.is_dataclass(kind) or typing.get_origin(kind) in (Mapping, dict):
        return "a JSON object"
    if typing.get_origin(kind) is tuple:
        return "a JSON array"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(kind, str(kind))
