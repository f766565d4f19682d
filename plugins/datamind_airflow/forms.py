"""Trigger forms generated from the stages' parameter dataclasses (``datamind.stage_params``): the form shows
the dataclass's defaults, titles, ranges and choices, so it cannot drift from the Python API."""

from __future__ import annotations

from airflow.sdk import Param

from datamind.stage_params import form_schema


def form_params(cls: type, exclude: tuple[str, ...] = (), defaults: object | None = None) -> dict[str, Param]:
    """One ``Param`` per form field of ``cls``, in declaration order (``defaults``: an instance whose values
    the form shows, e.g. limits the deployment set)."""
    return {name: Param(spec.pop("default"), **spec) for name, spec in form_schema(cls, exclude, defaults).items()}
