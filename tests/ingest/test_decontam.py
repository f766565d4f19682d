"""Decontamination: benchmark tables rejected at ingest (also when re-encoded, reordered or saved as XLSX),
and synthesized questions sharing a 13-word run with a benchmark question dropped with their chain."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from datamind.decontamination import BenchmarkIndex, build_index, load_index, ngrams
from datamind.ingest.sources import list_source_files
from datamind.ingest.stage import ingest_shard, plan_ingest
from datamind.schemas import CATALOG_FILES
from datamind.shards import read_rows
from datamind.storage import DataRoot
from datamind.synth.stage import drop_benchmark_questions

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "files"


@pytest.fixture(scope="module")
def dabench_index(shared_data, tmp_path_factory) -> BenchmarkIndex:
    return build_index({"dabench": str(shared_data / "dabench")})


def _ingest(root: DataRoot, folder: Path, index: BenchmarkIndex) -> dict[str, dict]:
    for spec in plan_ingest(root, list_source_files(str(folder)), "t", 100):
        ingest_shard(root, spec, None, "run", benchmarks=index)
    return {r["rel_path"]: r for r in read_rows(root, CATALOG_FILES, "catalog/files")}


def test_benchmark_tables_and_disguised_copies_are_rejected(shared_data, dabench_index, tmp_path):
    tables = shared_data / "dabench" / "da-dev-tables"
    titanic = pd.read_csv(tables / "titanic.csv")
    drop = tmp_path / "drop"
    drop.mkdir()
    # the same table, rows shuffled and columns reversed, written in another encoding
    disguised = titanic.sample(frac=1.0, random_state=7)[list(reversed(titanic.columns))]
    disguised.to_csv(drop / "passengers_utf16.csv", index=False, encoding="utf-16")
    # the same table saved as a workbook
    titanic.to_excel(drop / "passengers.xlsx", index=False)
    # an unrelated table, and one benchmark file copied verbatim under another name
    (drop / "sales_orders.csv").write_bytes((SAMPLES / "sales_orders.csv").read_bytes())
    (drop / "copy.csv").write_bytes((tables / "insurance.csv").read_bytes())
    rows = _ingest(DataRoot(str(tmp_path / "data")), drop, dabench_index)
    assert rows["sales_orders.csv"]["status"] == "accepted"
    for name in ("passengers_utf16.csv", "passengers.xlsx", "copy.csv"):
        assert rows[name]["reason_code"] == "benchmark_overlap", (name, rows[name]["reason"])
    assert "dabench:titanic.csv" in rows["passengers.xlsx"]["reason"]
    assert "dabench:insurance.csv" in rows["copy.csv"]["reason"]


def test_ingesting_the_benchmark_folder_itself_rejects_every_table(shared_data, dabench_index, tmp_path):
    rows = _ingest(DataRoot(str(tmp_path / "data")), shared_data / "dabench" / "da-dev-tables", dabench_index)
    assert len(rows) == 52 and {r["reason_code"] for r in rows.values()} == {"benchmark_overlap"}


def test_the_index_is_built_once_and_reloaded(shared_data, tmp_path, monkeypatch):
    root = DataRoot(str(tmp_path / "data"))
    assert load_index(root, {}).empty  # nothing configured: nothing filtered
    suites = {"dabench": str(shared_data / "dabench")}
    first = load_index(root, suites)
    cached = root.glob("benchmarks", "index-*.json")
    assert len(cached) == 1
    again = load_index(root, suites)
    assert again.file_sha == first.file_sha and len(again.tables) == len(first.tables) == 52
    monkeypatch.setenv("DATAMIND_BENCHMARKS", "[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        load_index(root)


def test_questions_sharing_13_words_with_a_benchmark_question_are_dropped_with_their_chain(dabench_index):
    bench = "Calculate the mean fare paid by the passengers."  # DABench question 0 (9 words)
    assert not ngrams(bench)  # too short for a 13-gram: cannot match anything
    long_q = next(q for q in dabench_index.question_ngrams.values())  # an item id; take its n-gram instead
    gram = next(g for g, item in dabench_index.question_ngrams.items() if item == long_q)

    def row(qid, question, hop=1, parents=()):
        return {"query_id": qid, "question": question, "hop": hop, "parent_query_ids": list(parents), "file_id": "f"}

    rows = [
        row("a", f"In our table, {gram}?"),
        row("b", "First, take that. Then what is the average price?", 2, ["a"]),
        row("c", "What is the average price across all records?"),
    ]
    kept, dropped = drop_benchmark_questions(rows, dabench_index, "fp", "run")
    assert [r["query_id"] for r in kept] == ["c"]
    assert {r["query_id"]: r["reason_code"] for r in dropped} == {
        "a": "benchmark_question_overlap",
        "b": "benchmark_question_overlap",
    }
    assert long_q in next(r["reason"] for r in dropped if r["query_id"] == "a")


def test_the_release_card_lists_what_decontamination_removed(shared_data, dabench_index, tmp_path):
    from datamind.publish.stage import decontamination_counts

    root = DataRoot(str(tmp_path / "data"))
    drop = tmp_path / "drop"
    drop.mkdir()
    (drop / "copy.csv").write_bytes((shared_data / "dabench" / "da-dev-tables" / "insurance.csv").read_bytes())
    (drop / "sales_orders.csv").write_bytes((SAMPLES / "sales_orders.csv").read_bytes())
    _ingest(root, drop, dabench_index)
    counts = decontamination_counts(root)
    assert counts["n_files"] == 1 and "dabench:insurance.csv" in counts["files"]["copy.csv"]
