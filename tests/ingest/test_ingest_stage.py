"""Planning and running ingestion shards: every file exactly once, reruns are no-ops, duplicates named."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from ingest_builders import table_rows, write_csv, xlsx_bytes, zip_with

from datamind.assets import DIRS
from datamind.ids import stable_id
from datamind.ingest.sources import list_source_files
from datamind.ingest.stage import ingest_shard, plan_ingest
from datamind.schemas import CATALOG_FILES
from datamind.settings import REPO_ROOT, Limits
from datamind.shards import read_rows, shard_paths

SAMPLES = REPO_ROOT / "samples" / "files"
EXPECTED_SAMPLES = {
    "sales_orders.csv": ("accepted", None, "csv"),
    "wetter_muenchen.csv": ("accepted", None, "csv"),
    "employees_latin1.csv": ("accepted", None, "csv"),
    "store_report.xlsx": ("accepted", None, "xlsx"),
    "survey_pilot.csv": ("rejected", "too_few_rows", "csv"),
    "broken_export.xlsx": ("rejected", "unloadable", "xlsx"),
    "sensor_dump.csv": ("rejected", "null_dominated", "csv"),
}


def run_ingest(root, source_uri, name, limits=None, shard_size=3):
    limits = limits or Limits()
    specs = plan_ingest(root, list_source_files(str(source_uri), limits), name, shard_size)
    json.dumps(specs)  # specs travel through XCom: they must be plain JSON
    return specs, [ingest_shard(root, s, limits, "run-1") for s in specs]


def catalog(root):
    return read_rows(root, CATALOG_FILES, DIRS["catalog_files"])


def test_samples_each_land_once_with_the_right_verdict(root):
    specs, summaries = run_ingest(root, SAMPLES, "samples")
    rows = catalog(root)
    assert sorted(r["rel_path"] for r in rows) == sorted(EXPECTED_SAMPLES)
    assert len({r["file_id"] for r in rows}) == len(rows)
    for r in rows:
        status, code, fmt = EXPECTED_SAMPLES[r["rel_path"]]
        assert (r["status"], r["reason_code"], r["format"]) == (status, code, fmt), r["rel_path"]
        data = (SAMPLES / r["rel_path"]).read_bytes()
        assert r["file_id"] == stable_id("samples", r["rel_path"], hashlib.sha256(data).hexdigest())
        assert r["size_bytes"] == len(data)
        if status == "accepted":
            assert Path(r["staged_uri"]).read_bytes() == data
            assert r["staged_uri"].startswith(root.path("raw", "samples", r["file_id"]))
            assert r["n_rows"] == sum(v["n_rows"] for v in r["table_verdicts"] if v["status"] == "accepted")
        else:
            assert r["staged_uri"] is None and r["reason"]
    report = next(r for r in rows if r["rel_path"] == "store_report.xlsx")
    assert [(v["table_name"], v["status"]) for v in report["table_verdicts"]] == [
        ("Q1 Sales", "accepted"),
        ("Targets", "accepted"),
        ("Notes", "rejected"),
    ]
    assert report["n_rows"] == 150 + 48 and report["n_tables"] == 2  # accepted tables
    assert sum(s["files"] for s in summaries) == 7 and sum(s["accepted"] for s in summaries) == 4
    assert len(specs) == 3  # 7 files in shards of 3


def test_rerun_is_a_noop_and_a_retried_shard_rewrites_its_own_file(root):
    specs, _ = run_ingest(root, SAMPLES, "samples")
    before = sorted(shard_paths(root, DIRS["catalog_files"]))
    assert plan_ingest(root, list_source_files(str(SAMPLES)), "samples", 3) == []
    ingest_shard(root, specs[0], Limits(), "run-2")  # a task retry
    assert sorted(shard_paths(root, DIRS["catalog_files"])) == before
    assert len(catalog(root)) == len(EXPECTED_SAMPLES)


def test_changed_file_gets_a_new_id(root, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    write_csv(src / "t.csv", 30)
    run_ingest(root, src, "s")
    write_csv(src / "t.csv", 31)
    specs, _ = run_ingest(root, src, "s")
    assert len(specs) == 1
    assert [r["status"] for r in catalog(root)] == ["accepted", "accepted"]


def test_duplicates_within_a_batch_and_against_the_catalog(root, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    write_csv(src / "a.csv", 30)
    shutil.copy(src / "a.csv", src / "b.csv")
    run_ingest(root, src, "s")
    rows = {r["rel_path"]: r for r in catalog(root)}
    assert rows["a.csv"]["status"] == "accepted"
    assert rows["b.csv"]["reason_code"] == "duplicate_content"
    assert rows["a.csv"]["file_id"] in rows["b.csv"]["reason"]
    later = tmp_path / "later"
    later.mkdir()
    shutil.copy(src / "a.csv", later / "c.csv")
    run_ingest(root, later, "other-source")
    c = next(r for r in catalog(root) if r["rel_path"] == "c.csv")
    assert c["reason_code"] == "duplicate_content" and rows["a.csv"]["file_id"] in c["reason"]


def test_lying_extension_is_staged_under_its_real_type(root, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "export.csv").write_bytes(xlsx_bytes({"Data": [["id", "city", "amount"]] + table_rows(30)}))
    run_ingest(root, src, "s")
    (row,) = catalog(root)
    assert (row["format"], row["declared_format"], row["status"]) == ("xlsx", "csv", "accepted")
    assert os.path.basename(row["staged_uri"]) == "export.xlsx"
    assert json.loads(row["provenance"])["original_filename"] == "export.csv"


def test_archive_members_including_a_bomb_are_all_cataloged(root, tmp_path):
    good = tmp_path / "g.csv"
    write_csv(good, 40)
    z = zip_with(tmp_path / "batch.zip", {"good.csv": good.read_bytes(), "zeros.csv": b"0" * 3_000_000})
    limits = Limits(max_uncompressed_bytes=1_000_000)
    run_ingest(root, z, "zipped", limits)
    rows = {r["rel_path"]: r for r in catalog(root)}
    assert rows["good.csv"]["status"] == "accepted"
    assert rows["good.csv"]["source_uri"] == f"zip://good.csv::{z}"
    assert (rows["zeros.csv"]["status"], rows["zeros.csv"]["reason_code"]) == ("rejected", "archive_bomb")
    assert rows["zeros.csv"]["format"] == "unknown"  # never decompressed, so never sniffed


def test_catalog_format_vocabulary(root, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "schema.sql").write_text('CREATE TABLE "t" (a INTEGER, b TEXT);\nINSERT INTO "t" VALUES (1, \'x\');\n')
    (src / "photo.csv").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    run_ingest(root, src, "s")
    rows = {r["rel_path"]: r for r in catalog(root)}
    assert {r["format"] for r in rows.values()} == {"unknown"}  # csv | xlsx | sqlite | unknown only
    assert "SQL" in rows["schema.sql"]["reason"] and rows["photo.csv"]["declared_format"] == "csv"


def test_a_csv_over_the_row_limit_is_kept_as_a_seeded_sample_of_its_rows_only_when_asked(root, tmp_path):
    """The paper's cut stays the default (rejected as too_many_rows); with sample_rows_over_limit the file is
    staged as that many of its rows, drawn with the file's hash as seed (the same file, the same sample),
    the title line, header, separator, decimal commas and encoding kept, and the catalog records it."""
    src = tmp_path / "src"
    src.mkdir()
    lines = ["Messwerte 2024 (Auszug)", "Station;Wert;Notiz"]
    lines += [f"S{i % 7};{i},{i % 10};Zeile {i} äöü" for i in range(2500)]
    (src / "werte.csv").write_bytes(("\r\n".join(lines) + "\r\n").encode("cp1252"))
    run_ingest(root, src, "s", Limits(max_rows=1000))
    (plain,) = catalog(root)
    assert (plain["status"], plain["reason_code"]) == ("rejected", "too_many_rows")

    other = type(root)(str(tmp_path / "root2"))
    rows = []
    for attempt in (other, type(root)(str(tmp_path / "root3"))):
        run_ingest(attempt, src, "s", Limits(max_rows=1000, sample_rows_over_limit=300))
        (row,) = catalog(attempt)
        rows.append(row)
    row = rows[0]
    assert (row["status"], row["n_rows"]) == ("accepted", 300)
    note = json.loads(row["provenance"])["row_sample"]
    assert (note["rows"], note["of_rows"]) == (300, 2500)
    data = open(row["staged_uri"].removeprefix("file://"), "rb").read()
    assert hashlib.sha256(data).hexdigest() == note["sha256"]
    text = data.decode("cp1252").split("\r\n")
    assert text[:2] == lines[:2] and len([t for t in text if t]) == 302
    kept = [int(t.split(";")[1].split(",")[0]) for t in text[2:] if t]
    assert kept == sorted(kept) and len(set(kept)) == 300  # file order, no row twice
    assert all(f"Zeile {k} äöü" in t for k, t in zip(kept, text[2:], strict=False))
    assert json.loads(rows[1]["provenance"])["row_sample"] == note  # the same file, the same sample
    # at most the row limit, whatever is asked
    run_ingest(type(root)(str(tmp_path / "root4")), src, "s", Limits(max_rows=200, sample_rows_over_limit=900))
    (capped,) = catalog(type(root)(str(tmp_path / "root4")))
    assert capped["n_rows"] == 200
