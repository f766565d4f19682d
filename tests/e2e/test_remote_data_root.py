"""A multi-worker deployment keeps its data root on object storage: the stages must behave the same on an
fsspec URL as on a local path. fsspec's in-memory filesystem stands in for s3:// or gs:// here."""

from __future__ import annotations

import uuid
from pathlib import Path

from datamind.ingest.sources import list_source_files
from datamind.ingest.stage import ingest_shard, plan_ingest
from datamind.profile.stage import plan_profile, profile_shard
from datamind.schemas import CATALOG_FILES, CATALOG_TABLES, QUERIES
from datamind.shards import read_table
from datamind.storage import DataRoot
from datamind.synth.params import SynthParams
from datamind.synth.stage import plan_synthesis, synthesize_shard

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "files"
PARAMS = SynthParams(queries_per_category=1, n_chains=1, verify_solutions=False)


def _run_pipeline(root: DataRoot) -> dict[str, list]:
    files = list_source_files(str(SAMPLES))
    for spec in plan_ingest(root, files, "samples", 3):
        ingest_shard(root, spec, None, "run")
    for spec in plan_profile(root, 3):
        profile_shard(root, spec, "run")
    for spec in plan_synthesis(root, 3, PARAMS):
        synthesize_shard(root, spec, PARAMS, "run")
    return {
        "files": sorted(read_table(root, CATALOG_FILES, "catalog/files", ["file_id", "status"]).to_pylist(), key=str),
        "tables": sorted(
            read_table(root, CATALOG_TABLES, "catalog/tables", ["table_id", "n_rows"]).to_pylist(), key=str
        ),
        "queries": sorted(read_table(root, QUERIES, "queries", ["query_id", "reference_answer"]).to_pylist(), key=str),
    }


def test_memory_url_root_matches_local_root(tmp_path):
    local = _run_pipeline(DataRoot(str(tmp_path / "local")))
    remote_root = DataRoot(f"memory://datamind-{uuid.uuid4().hex}")
    remote = _run_pipeline(remote_root)
    assert local["files"] and local["tables"] and local["queries"]
    assert remote == local
    # Staged files live under the remote root too, not on this worker's disk.
    assert remote_root.glob("raw", "samples", "*", "*")
