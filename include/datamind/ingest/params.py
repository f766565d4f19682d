"""The trigger forms of the ingest DAGs, declared once (``datamind.stage_params``).

Every ingest DAG's form is its source's fields here, the acceptance limits (``settings.Limits``, as the
deployment set them) and a shard size; the DAG edge reads a run's form into these classes once
(``datamind_airflow.ingest_tasks.read_form``). A DAG shows its deployment's values (a watched drop folder's URI and
name) by handing an instance to the form generator, never by writing a default of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from datamind.ingest.kaggle_config import CRAWL_WINDOWS
from datamind.settings import REPO_ROOT
from datamind.stage_params import StageParams, check_ranges, param

SOURCE_NAME_PATTERN = "^[a-z0-9][a-z0-9_.-]*$"  # part of every file_id and of folder names under the data root


def shard_size(default: int, unit: str):
    return param(default, f"{unit} per task instance", minimum=1, maximum=1000, section="Limits")


def source_name(default: str):
    return param(
        default,
        "Source name",
        description="Short name recorded as the files' source; part of every file_id.",
        pattern=SOURCE_NAME_PATTERN,
    )


@dataclass(frozen=True)
class FilesSource(StageParams):
    """ingest_files: any directory, glob, archive or fsspec URL, and more of them for a backfill."""

    source_uri: str = param(
        str(REPO_ROOT / "samples" / "files"),
        "Source URI",
        description="Directory, glob (e.g. /data/*.csv), .zip archive, or fsspec URL (s3://bucket/prefix).",
        min_length=1,
    )
    source_name: str = source_name("samples")
    more_source_uris: tuple[str, ...] = param(
        (),
        "More source URIs",
        description="Backfill several folders or prefixes in one run: their files are listed together "
        "(each under its folder's name) and ingested in mapped shards.",
        min_length=1,
    )
    shard_size: int = shard_size(50, "Files")

    def __post_init__(self) -> None:
        check_ranges(self)


@dataclass(frozen=True)
class BirdSource(StageParams):
    """ingest_bird: a BIRD / OmniSQL tree of ``<db_id>/<db_id>.sqlite`` folders, optionally sampled."""

    source_uri: str = param(
        str(REPO_ROOT / "samples" / "bird"),
        "BIRD root",
        description="Directory or archive (.zip) holding <db_id>/<db_id>.sqlite folders; fsspec URLs work too.",
        min_length=1,
    )
    source_name: str = source_name("bird")
    sample_size: int | None = param(
        None, "Databases to sample", minimum=1, description="Leave empty to take every database."
    )
    seed: int = param(0, "Sampling seed")
    shard_size: int = shard_size(20, "Databases")

    def __post_init__(self) -> None:
        check_ranges(self)


@dataclass(frozen=True)
class KaggleRun(StageParams):
    """What ingest_kaggle's form asks beyond the crawl itself (``KaggleCrawlConfig``)."""

    crawl_window: str = param(
        "auto",
        "Crawl window",
        enum=CRAWL_WINDOWS,
        description="auto: scheduled and backfill runs take only datasets last updated in their data interval "
        "(each week once); manual runs take what is there now. interval: always the run's interval. none: never.",
    )
    kaggle_conn_id: str = param("kaggle_default", "Kaggle Connection")
    shard_size: int = shard_size(50, "Files")

    def __post_init__(self) -> None:
        check_ranges(self)
