"""Trigger forms generated from the stages' parameter dataclasses (``datamind.stage_params``): the form shows
the dataclass's defaults, titles, ranges and choices, so it cannot drift from the Python API."""

from __future__ import annotations

import ast
import re
import textwrap

from airflow.sdk import Param

from datamind.stage_params import describe_pattern, form_schema


def form_params(cls: type, exclude: tuple[str, ...] = (), defaults: object | None = None) -> dict[str, Param]:
    """One ``Param`` per form field of ``cls``, in declaration order (``defaults``: an instance whose values
    the form shows, e.g. limits the deployment set)."""
    return {name: Param(spec.pop("default"), **spec) for name, spec in form_schema(cls, exclude, defaults).items()}


# How Airflow words a trigger whose conf a field's JSON schema refuses: the jsonschema error as str(), i.e. its
# message, the validator, the whole schema as a Python literal and the value.
_PARAM_ERROR = re.compile(
    r"^Invalid input for param (?P<name>[^:]+): (?P<message>[^\n]*)\n\n"
    r"Failed validating '(?P<validator>\w+)' in schema(?P<path>\S*?):\n(?P<schema>.*?)\n\n"
    r"On instance(?:\S*?):\n(?P<instance>.*)$",
    re.DOTALL,
)
_TYPE_WORDS = {
    "integer": "a whole number",
    "number": "a number",
    "string": "text",
    "boolean": "true or false",
    "array": 'a list, e.g. ["a", "b"]',
    "object": "a JSON object",
}


def explain_param_error(detail: str) -> str | None:
    """One sentence a person reads in the trigger form for Airflow's refusal of a form value (``detail``): the
    field's title and name, what it takes and what it was given, instead of the field's raw JSON schema. None
    when ``detail`` is not such a refusal."""
    m = _PARAM_ERROR.match(detail or "")
    if m is None:
        return None
    name, validator, message = m["name"].strip(), m["validator"], m["message"].strip()
    try:
        schema = ast.literal_eval(textwrap.dedent(m["schema"]))
    except (ValueError, SyntaxError):
        schema = {}
    schema = schema if isinstance(schema, dict) else {}
    # an item's schema (schema['items']) has no title of its own: the field is then named by its name only
    title = schema.get("title")
    field = f"{title} ({name})" if title and title != name else name
    given = " ".join(m["instance"].split())
    item = "Each item of " if m["path"] else ""
    if validator == "type":
        kinds = schema.get("type")
        kinds = [k for k in (kinds if isinstance(kinds, list) else [kinds]) if k not in (None, "null")]
        want = " or ".join(_TYPE_WORDS.get(k, str(k)) for k in kinds) or "another type"
        return f"{item}{field} must be {want}; it was given {given}."
    if validator == "pattern" and isinstance(schema.get("pattern"), str):
        return f"{item}{field} does not allow {given}. {describe_pattern(schema['pattern'])}"
    if validator == "minLength":
        return f"{item}{field} must not be empty."
    if validator in ("minimum", "maximum") and validator in schema:
        bound = "at least" if validator == "minimum" else "at most"
        return f"{item}{field} must be {bound} {schema[validator]}; it was given {given}."
    if validator == "enum" and isinstance(schema.get("enum"), list):
        return f"{item}{field} must be one of {', '.join(map(str, schema['enum']))}; it was given {given}."
    return f"{item}{field}: {message}."
