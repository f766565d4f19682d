"""Helpers called inside task bodies (never at parse time)."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from datamind.settings import Settings
from datamind.storage import DataRoot

log = logging.getLogger(__name__)


def settings() -> Settings:
    _benchmarks_from_variable()
    return Settings.from_env()


def _benchmarks_from_variable() -> None:
    """DATAMIND_BENCHMARKS may also be the Airflow Variable ``datamind_benchmarks`` (the environment wins):
    copied into this task's environment, where ingest, synthesis and evaluation read it."""
    import json
    import os

    if os.environ.get("DATAMIND_BENCHMARKS"):
        return
    try:
        from airflow.sdk import Variable

        value = Variable.get("datamind_benchmarks", default=None)
    except Exception:  # noqa: BLE001 - no Variable backend reachable (parse time, unit tests): env only
        return
    if value:
        os.environ["DATAMIND_BENCHMARKS"] = value if isinstance(value, str) else json.dumps(value)


def data_root() -> DataRoot:
    return DataRoot(settings().data_root)


def max_shards() -> int:
    """The most shard specs one plan may return: Airflow fails a task whose mapped list is longer than
    ``core.max_map_length``, so planners raise their shard size to stay within it."""
    from airflow.sdk.configuration import conf

    from datamind.shards import AIRFLOW_MAX_MAP_LENGTH

    return conf.getint("core", "max_map_length", fallback=AIRFLOW_MAX_MAP_LENGTH)


def run_id() -> str:
    """The Airflow run id, made safe for use in file names."""
    from airflow.sdk import get_current_context

    from datamind.ids import safe_run_id

    return safe_run_id(get_current_context()["run_id"])


def connection_dict(conn_id: str) -> dict[str, Any] | None:
    """Fields of an Airflow Connection as a plain dict, or None when it is not defined.

    The dict holds secrets: pass it straight to the constructor that needs it, never log it.
    """
    from airflow.sdk import Connection
    from airflow.sdk.exceptions import AirflowNotFoundException, AirflowRuntimeError

    try:
        conn = Connection.get(conn_id)
    except (AirflowNotFoundException, AirflowRuntimeError, KeyError, ValueError) as exc:
        log.info("Connection %r not defined (%s); falling back to the environment", conn_id, type(exc).__name__)
        return None
    return {
        "conn_type": conn.conn_type,
        "host": conn.host,
        "login": conn.login,
        "password": conn.password,
        "schema": conn.schema,
        "port": conn.port,
        "extra": conn.extra_dejson,
    }


def log_summary(title: str, summary: dict[str, Any]) -> None:
    lines = [title] + [f"  {k}: {v}" for k, v in summary.items()]
    log.info("\n".join(lines))


# What a retry cannot fix: a path that is not there, a URL scheme nobody serves, a value that does not
# validate.  Timeouts, 429s, 5xx and lost workers raise other types and keep Airflow's retries.
PERMANENT_ERRORS = (FileNotFoundError, NotADirectoryError, PermissionError, ValueError)


@contextlib.contextmanager
def fail_fast_on_permanent_errors(what: str, also: tuple[type[BaseException], ...] = ()):
    """Turn a permanent error (``PERMANENT_ERRORS`` and ``also``) into AirflowFailException: the task fails at
    once, no retries, with one line that says what and why. That line is also logged as an error of its own
    before Airflow's traceback: the log's reader sees it first, not inside the stack. A missing or unreadable
    path says all there is to know, so its exception carries no chained traceback either; any other cause keeps
    its traceback (it may be a bug)."""
    try:
        yield
    except (*PERMANENT_ERRORS, *also) as exc:
        from airflow.sdk.exceptions import AirflowFailException

        message = f"{what}: {permanent_reason(exc)} (permanent: not retried)"
        log.error(message)
        if isinstance(exc, OSError):
            raise AirflowFailException(message) from None
        raise AirflowFailException(message) from exc


def permanent_reason(exc: BaseException) -> str:
    """An error's cause in words: our own messages as they are; the OS's ("[Errno 2] No such file or directory:
    '/x'") without the errno; the exception's type only when it says nothing else."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename!r}" if exc.filename else exc.strerror
    return str(exc) or type(exc).__name__


def origin() -> dict[str, str]:
    """The DAG and task writing a report (so the UI can link the task to it)."""
    from airflow.sdk import get_current_context

    ti = get_current_context()["ti"]
    return {"dag_id": ti.dag_id, "task_id": ti.task_id}


def announce(asset, result: dict[str, Any], version: str | None = None, report_task: str | None = None) -> None:
    """Put the run's numbers and its report's URL on the Asset event this task emits: the report of
    ``report_task`` of this run when another task wrote it (default: this task's own).

    A run that wrote nothing new emits no event (the task ends as skipped): a rerun or a backfill over
    work already done stops here instead of waking every downstream DAG to find nothing to do."""
    from airflow.sdk import get_current_context
    from airflow.sdk.exceptions import AirflowSkipException

    if not result.get("new_rows"):
        raise AirflowSkipException(f"nothing new for {asset.name}: downstream DAGs are not triggered")

    from datamind.pipeline import asset_event_extra
    from datamind_airflow.urls import framed_report_url

    context = get_current_context()
    ti = context["ti"]
    url = framed_report_url(ti.dag_id, context["run_id"], report_task or ti.task_id)
    extra = asset_event_extra(result, version=version or context["run_id"], report_url=url)
    context["outlet_events"][asset].extra = {**context["outlet_events"][asset].extra, **extra}


def mapped_results(values) -> list:
    """Every result of a mapped upstream task. Indexing up to ``len`` reads exactly the stored results;
    iterating the lazy sequence probes one past the end and makes the SDK log an "XCom not found" error."""
    return [values[i] for i in range(len(values))]
