"""Runtime settings, read from the environment so that workers, tests and the CLI agree.

Every knob has a default that makes ``make demo`` work on a laptop; deployments override
through ``DATAMIND_*`` variables (docker-compose sets them for every Airflow service).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from datamind.stage_params import check_ranges, param

REPO_ROOT = Path(__file__).resolve().parents[2]


def prompts_dir() -> Path:
    """Prompt templates, exemplars and grammars: ``<repo>/prompts`` unless ``DATAMIND_PROMPTS_DIR`` says otherwise."""
    return Path(os.environ.get("DATAMIND_PROMPTS_DIR") or REPO_ROOT / "prompts")


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from exc


@dataclass(frozen=True)
class Limits:
    """Acceptance limits for data files (the paper's section 3.1 filter, made configurable)."""

    # paper, section 3.1: tables of 20 to 1,000 rows
    min_rows: int = param(20, "Minimum rows per table", minimum=1, section="Limits")
    max_rows: int = param(1000, "Maximum rows per CSV/XLSX table", minimum=1, section="Limits")
    # A database keeps its big tables (BIRD-style fact tables are what multi-table questions join to); the
    # 20-1,000-row rule is for flat files. Above this a database table is rejected as too_many_rows.
    max_db_table_rows: int = param(
        200_000,
        "Maximum rows per database table",
        minimum=1,
        section="Limits",
        description="BIRD-style databases keep their large tables up to this size",
    )
    # The paper's cut rejects a flat table over ``max_rows``; a deployment that wants such files (diamonds, census,
    # bike rentals...) keeps each as a seeded random sample of its rows instead (ingest.stage.row_sample).
    sample_rows_over_limit: int = param(
        0,
        "Keep a larger CSV as a sample of this many rows",
        minimum=0,
        section="Limits",
        description="0 rejects a CSV table over the row limit as too_many_rows (the paper's cut); N keeps it as "
        "a seeded random sample of N rows (at most the limit), recorded in the catalog and the release card.",
    )
    # The rest are the deployment's guards (DATAMIND_* variables), not choices made per run.
    max_cols: int = param(200, "Maximum columns", minimum=1, form=False)
    # Files larger than this are rejected before parsing so a hostile or huge input cannot exhaust memory.
    max_file_bytes: int = param(64 * 1024 * 1024, "Maximum file size", minimum=1, form=False)
    # Bound on what we decompress out of an archive member (zip-bomb guard).
    max_uncompressed_bytes: int = param(256 * 1024 * 1024, "Maximum uncompressed member size", minimum=1, form=False)
    max_cell_chars: int = param(10_000, "Maximum characters per cell", minimum=1, form=False)
    # Each file is parsed in a child process under these caps: a reader that aborts, allocates without
    # bound or spins costs that one file (rejected as parse_limit), never the shard or the worker.
    parse_memory_mb: int = param(4096, "Parser memory cap (MB)", minimum=64, form=False)
    parse_cpu_s: int = param(120, "Parser CPU cap per file (s)", minimum=1, form=False)

    def __post_init__(self) -> None:
        check_ranges(self)

    @classmethod
    def from_env(cls) -> Limits:
        d = cls()
        return cls(
            min_rows=_env_int("DATAMIND_MIN_ROWS", d.min_rows),
            max_rows=_env_int("DATAMIND_MAX_ROWS", d.max_rows),
            max_db_table_rows=_env_int("DATAMIND_MAX_DB_TABLE_ROWS", d.max_db_table_rows),
            sample_rows_over_limit=_env_int("DATAMIND_SAMPLE_ROWS_OVER_LIMIT", d.sample_rows_over_limit),
            max_cols=_env_int("DATAMIND_MAX_COLS", d.max_cols),
            max_file_bytes=_env_int("DATAMIND_MAX_FILE_BYTES", d.max_file_bytes),
            max_uncompressed_bytes=_env_int("DATAMIND_MAX_UNCOMPRESSED_BYTES", d.max_uncompressed_bytes),
            max_cell_chars=_env_int("DATAMIND_MAX_CELL_CHARS", d.max_cell_chars),
            parse_memory_mb=_env_int("DATAMIND_PARSE_MEMORY_MB", d.parse_memory_mb),
            parse_cpu_s=_env_int("DATAMIND_PARSE_CPU_S", d.parse_cpu_s),
        )

    def table_row_cap(self, in_database: bool) -> int:
        return self.max_db_table_rows if in_database else self.max_rows

    def with_overrides(self, **overrides: int | None) -> Limits:
        known = {f.name for f in fields(self)}
        clean = {k: int(v) for k, v in overrides.items() if v is not None and k in known}
        return replace(self, **clean)


@dataclass(frozen=True)
class Settings:
    data_root: str = field(default_factory=lambda: str(REPO_ROOT / "data"))
    limits: Limits = field(default_factory=Limits)
    shard_size: int = 50

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            data_root=os.environ.get("DATAMIND_DATA_ROOT") or str(REPO_ROOT / "data"),
            limits=Limits.from_env(),
            shard_size=_env_int("DATAMIND_SHARD_SIZE", 50),
        )


def worker_hostname() -> str:
    """The name a worker records on the task instances it runs (Airflow's ``[core] hostname_callable``):
    ``DATAMIND_WORKER_HOSTNAME`` where a deployment gives its workers their own names, else the FQDN."""
    import socket

    return os.environ.get("DATAMIND_WORKER_HOSTNAME") or socket.getfqdn()


# -- the review gate of publish_dataset (datamind.publish.promotion): read by the DAG file at parse time, so
# this module stays free of heavy imports
APPROVE_EVERY_ENV = "DATAMIND_APPROVE_EVERY_RELEASE"
APPROVERS_ENV = "DATAMIND_RELEASE_APPROVERS"


def approve_every_release() -> bool:
    """Whether a person approves every release, not only one that misses its audit."""
    return os.environ.get(APPROVE_EVERY_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def release_approvers(raw: str | None = None) -> list[dict[str, str]] | None:
    """Who may approve or reject a release (``DATAMIND_RELEASE_APPROVERS``), as Airflow's HITL users.

    A comma-separated list of user ids, each optionally ``id=Display name``. The id is what the deployment's
    auth manager calls the user (the username with the simple auth manager, the numeric id with FAB): Airflow
    compares it with the id of the user who answers. ``None`` (unset or blank): anyone allowed to answer the
    DAG's required actions may decide."""
    raw = os.environ.get(APPROVERS_ENV, "") if raw is None else raw
    names: dict[str, str] = {}  # id -> display name given ("" for none), in the order written
    for entry in raw.split(","):
        if not entry.strip():
            continue
        uid, _, name = (part.strip() for part in entry.partition("="))
        if not uid:
            raise ValueError(f"{APPROVERS_ENV}: {entry.strip()!r} names no user id (write id or id=Display name)")
        if name and names.get(uid) and names[uid] != name:
            raise ValueError(f"{APPROVERS_ENV}: user id {uid!r} has two names ({names[uid]!r}, {name!r})")
        names[uid] = name or names.get(uid, "")
    return [{"id": uid, "name": name or uid} for uid, name in names.items()] or None
