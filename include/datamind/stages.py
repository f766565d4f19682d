"""The pipeline's stages in order, each named once: the table whose new rows wake it, the table it writes,
the label of its rows in ``rejections/``, and what one planned item is.

The DAG files take their schedules, outlets and output tables from here; the stage modules take their
rejection labels; the report index orders and labels its reports by it. A table is a key of
``assets.DIRS`` (its directory) and of ``schemas.ALL`` (its contract).
"""

from __future__ import annotations

from dataclasses import dataclass

from datamind import assets


@dataclass(frozen=True)
class Stage:
    dag_id: str
    reads: str | None  # the table whose Asset schedules it (None: run by hand, a schedule or a drop folder)
    writes: str  # the table its rows go to
    rejections: str | None  # the ``stage`` value of the rows it records in rejections/
    item: str  # what its planner counts and shards


PIPELINE: tuple[Stage, ...] = (
    Stage("ingest_files", None, "catalog_files", None, "file"),
    Stage("ingest_bird", None, "catalog_files", None, "database"),
    Stage("ingest_kaggle", None, "catalog_files", "ingest_kaggle", "dataset"),
    Stage("profile_files", "catalog_files", "catalog_tables", "profile", "file"),
    Stage("synthesize_queries", "catalog_tables", "queries", "synthesis", "table"),
    Stage("sample_trajectories", "queries", "trajectories", "rollout", "query"),
    Stage("judge_trajectories", "trajectories", "judged", "judge", "query"),
    Stage("publish_dataset", "judged", "dataset", "filter", "judged row"),
    Stage("train_agent", "dataset", "checkpoints", "export", "dataset version"),
    Stage("evaluate_agent", "checkpoints", "eval_results", None, "benchmark question"),
)
STAGES = {s.dag_id: s for s in PIPELINE}

# The Asset URI announcing new rows of each table that chains two stages.
ASSET_OF = {
    "catalog_files": assets.CATALOG_FILES,
    "catalog_tables": assets.CATALOG_TABLES,
    "queries": assets.QUERIES,
    "trajectories": assets.TRAJECTORIES,
    "judged": assets.JUDGED,
    "dataset": assets.DATASET,
    "checkpoints": assets.CHECKPOINTS,
}

# The column naming what a stage's planner counts (``Stage.item``) in the table it reads.
ITEM_COLUMN = {
    "catalog_files": "file_id",
    "catalog_tables": "table_id",
    "queries": "query_id",
    "trajectories": "query_id",
}

# Tables whose rows follow another table's contract (the judged rows are dataset rows before the rule filters).
CONTRACT_OF = {"judged": "dataset"}


def contract(table: str) -> str:
    """The ``schemas.ALL`` name of ``table``'s contract."""
    return CONTRACT_OF.get(table, table)
