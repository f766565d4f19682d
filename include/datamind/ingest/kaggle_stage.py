"""Kaggle crawl as a pipeline stage: crawl into a local temp dir, land files under the data root,
record failed or skipped datasets, and hand the landed files to the generic ingest planner.

Landing paths are ``landing/kaggle/<owner>/<dataset>/<version>/<file>``, so a rerun lands the same
bytes on the same keys, and the catalog (keyed by source, path and content) dedupes the rest.
"""

from __future__ import annotations

import json
import logging
import tempfile
from datetime import UTC, datetime
from typing import Any

import pyarrow.compute as pc

from datamind.assets import DIRS
from datamind.ids import stable_id
from datamind.ingest.kaggle import crawl_kaggle, seen_key
from datamind.ingest.kaggle_config import KaggleCrawlConfig, KaggleCredentials
from datamind.ingest.sources import SourceFile
from datamind.schemas import CATALOG_FILES, REJECTIONS, rejection
from datamind.settings import Limits
from datamind.shards import read_table, shard_name, write_shard
from datamind.stages import STAGES
from datamind.storage import DataRoot

log = logging.getLogger(__name__)
SOURCE = "kaggle"


def completed_versions(root: DataRoot, source: str = SOURCE) -> set[str]:
    """``owner/slug@version`` of every Kaggle dataset version already in the catalog."""
    t = read_table(root, CATALOG_FILES, DIRS["catalog_files"], columns=["source", "provenance"])
    t = t.filter(pc.equal(t.column("source"), source)) if t.num_rows else t
    seen = set()
    for raw in t.column("provenance").to_pylist():
        prov = json.loads(raw or "{}")
        if prov.get("dataset_ref") and prov.get("dataset_version") is not None:
            seen.add(seen_key(prov["dataset_ref"], prov["dataset_version"]))
    return seen


def _failure_rows(result, run_id: str) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    rows = []
    for kind, items in (("failed", result.failures), ("skipped", result.skipped)):
        for item in items:
            code = item.get("reason_code") or f"{kind}_{item.get('stage', 'unknown')}"
            rows.append(
                rejection(
                    STAGES["ingest_kaggle"].rejections,
                    stable_id(SOURCE, kind, item.get("ref"), item.get("version"), code, run_id),
                    code,
                    str(item.get("reason", "")),
                    raw=json.dumps(item, default=str),
                    run_id=run_id,
                    created_at=now,
                )
            )
    return rows


def crawl_to_landing(
    root: DataRoot,
    config: KaggleCrawlConfig,
    credentials: KaggleCredentials | None,
    limits: Limits,
    run_id: str,
) -> tuple[list[SourceFile], dict[str, Any]]:
    """Crawl, land files under the data root, record failures/skips; returns files for plan_ingest."""
    already = completed_versions(root)
    with tempfile.TemporaryDirectory(prefix="kaggle-") as tmp:
        result = crawl_kaggle(config, credentials, tmp, already_seen=already)
        files = []
        for f in result.files:
            rel = f"landing/{SOURCE}/{f.rel_path}"
            root.put_file(f.local_path, rel)
            files.append(
                SourceFile(
                    rel_path=f.rel_path,
                    source_uri=root.uri(rel),
                    size=int(f.provenance["size_bytes"]),
                    read_cap=limits.max_file_bytes,
                    provenance=dict(f.provenance),
                )
            )
    rows = _failure_rows(result, run_id)
    write_shard(root, REJECTIONS, DIRS["rejections"], rows, shard_name([r["item_id"] for r in rows], prefix="kaggle"))
    summary = {
        "downloaded_files": len(result.files),
        "completed_datasets": len(result.completed),
        "failed_datasets": len(result.failures),
        "skipped_datasets": len(result.skipped),
        "already_in_catalog": len(already),
    }
    return files, summary
