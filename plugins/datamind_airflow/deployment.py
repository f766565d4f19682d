"""A deployment's settings per stage (``datamind.stage_settings``) in Airflow: the Variable
``datamind_settings_<dag_id>`` is what a stage's trigger form shows as its defaults, and what every run of the
stage resolves its parameters under (a manual run's conf overrides it for that run; an Asset-triggered run or a
backfill without conf runs under it)."""

from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import Param

from datamind import stage_settings

log = logging.getLogger(__name__)

# What a stage's docs say about its settings (appended to the DAG's doc_md).
DOC = """

**Settings.** This deployment's settings for the stage live in the Airflow Variable `{variable}` (a JSON object
of form fields, Admin > Variables): the form shows them as its defaults, and every run uses them unless its conf
names another value, so an Asset-triggered run or a backfill runs with the settings the earlier runs used.
{redo}"""
REDO = (
    "A run whose settings change the parameter fingerprint redoes every item earlier settings covered (and every "
    "later stage pays for the new rows): its `plan` task says so in its log, with the settings that differ, before "
    "it spends anything."
)


def doc(dag_id: str, doc_md: str | None) -> str:
    """``doc_md`` with the paragraph saying where the stage's settings live."""
    redo = REDO if dag_id in ("synthesize_queries", "judge_trajectories") else ""
    return (doc_md or "") + DOC.format(variable=stage_settings.variable_name(dag_id), redo=redo)


def _read(dag_id: str) -> Any:
    from airflow.sdk import Variable

    return Variable.get(stage_settings.variable_name(dag_id), default=None)


def _checked(dag_id: str, name: str, value: Any, schema: dict) -> Any:
    """``value`` through the form field's checks (type, range, choices), or an error naming the Variable."""
    from airflow.sdk.exceptions import ParamValidationError

    try:
        return Param(value, schema=dict(schema)).resolve()
    except ParamValidationError as exc:
        raise ValueError(
            f"Variable {stage_settings.variable_name(dag_id)}: {name}={value!r} is refused: {exc}"
        ) from exc


def stage_form(dag_id: str, params: dict[str, Param]) -> dict[str, Param]:
    """The trigger form of ``dag_id``: ``params`` with this deployment's settings as their defaults, each marked as
    such. Read when the DAG file is parsed: a malformed Variable is the DAG's import error, shown in the UI. Where
    no Variable backend answers at parse time (``airflow dags test`` reads only environment variables then) the
    form keeps the stage's defaults, and the run applies the settings when it starts (``run_params``)."""
    try:
        raw = _read(dag_id)
    except Exception:  # noqa: BLE001 - no Variable backend reachable while parsing: the run resolves them again
        log.debug("settings of %s not readable at parse time", dag_id, exc_info=True)
        raw = None
    stored = stage_settings.parse(dag_id, raw, params)
    out = dict(params)
    for name, value in stored.items():
        p = params[name]
        note = f"Set by this deployment (Variable {stage_settings.variable_name(dag_id)})."
        out[name] = Param(
            _checked(dag_id, name, value, p.schema),
            description=f"{p.description} {note}" if p.description else note,
            schema=dict(p.schema),
        )
    return out


def run_params() -> dict[str, Any]:
    """This run's parameters: Airflow's params (form defaults and the run's conf), with each setting of the
    stage's Variable the conf does not name. Logged with where the values came from."""
    from airflow.sdk import get_current_context

    from datamind_airflow import runtime

    context = get_current_context()
    dag_id = context["ti"].dag_id
    params = dict(context["params"])
    with runtime.fail_fast_on_permanent_errors(f"settings of {dag_id}"):
        stored = stage_settings.parse(dag_id, _read(dag_id), params)
        dag_params = context["dag"].params
        stored = {k: _checked(dag_id, k, v, dag_params.get_param(k).schema) for k, v in stored.items()}
    resolved = stage_settings.resolve(params, stored, context["dag_run"].conf)
    runtime.log_summary(f"{dag_id}: parameters", resolved.summary(dag_id))
    return resolved.params
