"""How a stage declares its parameters: one frozen dataclass whose fields carry their form.

Each field made with ``param()`` holds its default, a title, and the range or choices it accepts. The DAG's
trigger form is generated from the dataclass (``form_schema``), and the dataclass checks the same ranges when
it is built (``check_ranges``), so a run from the form, one from Python and the fingerprint of either cannot
disagree about a default or a limit.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar

from datamind.ids import stable_id

_FORM = "form"
_FINGERPRINT = "fingerprint"


def param(
    default: Any,
    title: str,
    *,
    description: str | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    enum: tuple | list | None = None,
    pattern: str | None = None,
    min_length: int | None = None,
    min_items: int | None = None,
    section: str | None = None,
    form: bool = True,
    factory: Any = None,
    fingerprint: bool = True,
) -> Any:
    """A dataclass field with its form. ``enum``, ``pattern`` and ``min_length`` on a tuple field constrain its
    items. ``form=False`` keeps a field out of the trigger form (set from Python or the environment only).
    ``factory`` makes a mapping default (``default`` is then ignored): a dict is never shared between instances.
    ``fingerprint=False``: the field changes how work is grouped or scheduled, not what is produced, so it stays
    out of the parameters' fingerprint (``StageParams.fingerprint``)."""
    spec = {
        "title": title,
        "description": description,
        "minimum": minimum,
        "maximum": maximum,
        "pattern": pattern,
        "minLength": min_length,
        "minItems": min_items,
        "section": section,
    }
    spec = {k: v for k, v in spec.items() if v is not None}
    if enum is not None:
        spec["enum"] = list(enum)
    spec["in_form"] = form
    meta = {_FORM: spec, _FINGERPRINT: fingerprint}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    if isinstance(default, (list, dict)):
        raise TypeError("use a tuple (immutable) default for a sequence parameter, or factory= for a mapping")
    return dataclasses.field(default=default, metadata=meta)


def _json_type(hint: Any) -> tuple[Any, bool]:
    """(JSON schema type, is a sequence) of a field's annotation."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        kind, seq = _json_type(inner[0])
        return (["null", kind] if len(inner) < len(args) else kind), seq
    if typing.get_origin(hint) in (tuple, list):
        return "array", True
    if typing.get_origin(hint) is dict:
        return "object", False
    return {bool: "boolean", int: "integer", float: "number", str: "string", dict: "object"}.get(hint, "string"), False


@functools.cache
def _specs(cls: type) -> tuple[tuple[dataclasses.Field, dict, Any, bool], ...]:
    """(field, form spec, JSON type, is a sequence) per declared field; resolved once per class (settings objects
    are built per file and per task: resolving annotations each time cost more than what they check)."""
    hints = typing.get_type_hints(cls)
    return tuple(
        (f, f.metadata[_FORM], *_json_type(hints[f.name])) for f in dataclasses.fields(cls) if _FORM in f.metadata
    )


_CLASS_WORDS = {"a-z": "lowercase letters", "A-Z": "capital letters", "0-9": "digits"}
_SIMPLE_PATTERN = re.compile(r"^\^\[([^\]]+)\]\[([^\]]+)\]\*\$$")


def _characters(cls: str) -> str:
    """A regex character class's content in words: ``a-z0-9_.-`` -> "lowercase letters, digits, _ . -"."""
    words, rest = [], cls
    for span, word in _CLASS_WORDS.items():
        if span in rest:
            words.append(word)
            rest = rest.replace(span, "")
    rest = rest.replace("\\", "")
    return ", ".join(words + ([" ".join(rest)] if rest else []))


def describe_pattern(pattern: str) -> str:
    """What a text field's pattern allows, in words a person reads before submitting (the form otherwise shows
    the regex only after a refusal)."""
    m = _SIMPLE_PATTERN.match(pattern)
    if m is None:
        return f"Must match the pattern {pattern}."
    first, rest = _characters(m.group(1)), _characters(m.group(2))
    left_out = [w for w, absent in (("spaces", " " not in m.group(2)), ("capitals", "A-Z" not in m.group(2))) if absent]
    return (
        f"Allowed characters: {rest}"
        + (f" (no {', no '.join(left_out)})" if left_out else "")
        + (f"; it must start with one of: {first}.")
    )


def form_schema(cls: type, exclude: tuple[str, ...] = (), defaults: Any = None) -> dict[str, dict[str, Any]]:
    """Field name -> {"default", "type", "title", ...}: what an Airflow ``Param`` takes, in declaration order.
    ``defaults``, an instance of ``cls``, shows its values instead (settings a deployment configured).

    A list whose default is empty and that needs no item is optional: its type admits null, which is what the
    form reads to mark a field required or not (``StageParams.from_form`` reads a null back as the empty
    default). A text field with a pattern says in its description, in words, which characters it allows."""
    out: dict[str, dict[str, Any]] = {}
    for f, spec, kind, seq in _specs(cls):
        if not spec["in_form"] or f.name in exclude:
            continue
        schema = {k: v for k, v in spec.items() if k != "in_form"}
        if "pattern" in schema:
            words = describe_pattern(schema["pattern"])
            schema["description"] = f"{schema['description']} {words}" if schema.get("description") else words
        declared = f.default_factory() if f.default is dataclasses.MISSING else f.default
        if seq:
            item_keys = [k for k in ("enum", "pattern", "minLength") if k in schema]
            schema["items"] = {"type": "string", **{k: schema.pop(k) for k in item_keys}}
            if not declared and not spec.get("minItems") and not isinstance(kind, list):
                kind = ["null", kind]
        default = getattr(defaults, f.name) if defaults is not None else declared
        if isinstance(default, (tuple, dict)):
            default = list(default) if isinstance(default, tuple) else dict(default)
        out[f.name] = {"default": default, "type": kind, **schema}
    return out


def check_ranges(obj: Any) -> None:
    """Raise ValueError naming the field when a value is outside its declared range or choices."""
    for f, spec, kind, _ in _specs(type(obj)):
        value = getattr(obj, f.name)
        if value is None:
            if not isinstance(kind, list):  # only ``X | None`` fields may be empty
                raise ValueError(f"{f.name} ({spec['title']}) must be set")
            continue
        choices = spec.get("enum")
        values = value if isinstance(value, (tuple, list)) else (value,)
        if choices is not None:
            bad = [v for v in values if v not in choices]
            if bad:
                raise ValueError(f"{f.name} ({spec['title']}) must be one of {choices}, got {bad[0]!r}")
        if isinstance(value, (tuple, list)) and len(value) < spec.get("minItems", 0):
            raise ValueError(f"{f.name} ({spec['title']}) needs at least {spec['minItems']} item(s)")
        texts = [v for v in values if isinstance(v, str)]
        if "minLength" in spec and any(len(v) < spec["minLength"] for v in texts):
            raise ValueError(f"{f.name} ({spec['title']}) must not be empty")
        unmatched = [v for v in texts if "pattern" in spec and re.search(spec["pattern"], v) is None]
        if unmatched:
            raise ValueError(f"{f.name} ({spec['title']}) must match {spec['pattern']}, got {unmatched[0]!r}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            lo, hi = spec.get("minimum"), spec.get("maximum")
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                span = f">= {lo}" if hi is None else f"<= {hi}" if lo is None else f"between {lo} and {hi}"
                raise ValueError(f"{f.name} ({spec['title']}) must be {span}, got {value!r}")


class StageParams:
    """What every stage's parameter dataclass (frozen, fields declared with ``param``) inherits: built once, at
    the DAG edge, from the form (``from_form``), where unknown keys are refused; its fingerprint (a property)
    covers the fields not declared ``fingerprint=False``."""

    # keys a form carries for the orchestrator only (a Connection id): dropped by ``from_form``
    FORM_ONLY: ClassVar[frozenset[str]] = frozenset()
    # what the fingerprint hashes besides the fields, and how long it is (each stage keeps the ids it had)
    FINGERPRINT_PREFIX: ClassVar[tuple[str, ...]] = ()
    FINGERPRINT_LENGTH: ClassVar[int] = 10

    @classmethod
    def from_form(cls, raw: Mapping[str, Any] | None):
        """From a run's form or a dict: unknown keys are an error (a typo never silently means a default)."""
        raw = cls.normalize({k: v for k, v in (raw or {}).items() if k not in cls.FORM_ONLY})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} parameter(s) {unknown}; known: {sorted(known)}")
        for f, _, kind, seq in _specs(cls):  # an optional list the form left empty arrives as null
            if seq and raw.get(f.name, ()) is None and not isinstance(kind, list) and f.default == ():
                raw[f.name] = ()
        return cls(**raw)

    @classmethod
    def given(cls, params: Any):
        """``params`` as a stage function receives them: an instance of this class, nothing else. A form or a dict
        is turned into one once, at the DAG edge (``from_form``); a stage that converted again would be a second
        place deciding what a key means."""
        if not isinstance(params, cls):
            raise TypeError(
                f"expected {cls.__name__}, got {type(params).__name__}; build it with {cls.__name__}.from_form(...)"
            )
        return params

    @classmethod
    def normalize(cls, raw: dict[str, Any]) -> dict[str, Any]:
        """A stage's own reading of its form before the fields are checked (nested settings, "all")."""
        return raw

    @classmethod
    def fingerprint_fields(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get(_FINGERPRINT, True))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def fingerprint_view(self) -> dict[str, Any]:
        """What the fingerprint hashes: the fingerprinted fields; a stage adds what its fields resolve to."""
        d = self.to_dict()
        return {k: d[k] for k in self.fingerprint_fields()}

    @property
    def fingerprint(self) -> str:
        return stable_id(*self.FINGERPRINT_PREFIX, self.fingerprint_view(), length=self.FINGERPRINT_LENGTH)
