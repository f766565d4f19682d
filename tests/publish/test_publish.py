"""Publishing: filters applied, versioned sized shards, readable by duckdb/polars/datasets, kill-safe."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from datamind.agent import protocol as p
from datamind.assets import DIRS
from datamind.publish.stage import dataset_glob, publish_dataset
from datamind.schemas import DATASET, REJECTIONS
from datamind.shards import read_rows, write_shard
from datamind.storage import DataRoot
from datamind.tables import read_manifest

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def judged_row(i: int, answer: str | None = None, think: str = "The printed value answers the question.") -> dict:
    answer = answer if answer is not None else f"The total is {i}."
    msgs = [
        {"role": "system", "content": "You are a data analyst."},
        {"role": "user", "content": f"Question {i}: what is the total?"},
        {"role": "assistant", "content": p.format_code_turn("Compute the total.", f"print({i})")},
        {"role": "tool", "content": p.format_interpreter(str(i))},
        {"role": "assistant", "content": p.format_answer_turn(think, answer)},
    ]
    return {
        "sample_id": f"s{i:06d}",
        "query_id": f"q{i}",
        "trajectory_id": f"t{i}",
        "file_id": "f1",
        "data_uri": "raw/f1/x.csv",  # relative to the data root, as staged files are
        "data_format": "csv",
        "category": "aggregation" if i % 2 else "counting",
        "hop": 1,
        "question": f"Question {i}",
        "messages": msgs,
        "final_answer": answer,
        "reference_answer": str(i),
        "judge_verdict": "yes",
        "judge_reasoning": "agree",
        "selection_strategy": "con_select",
        "reflection_round": 0,
        "model": "m",
        "template_versions": json.dumps({"judge": "j@1"}),
        "created_at": NOW,
    }


def write_judged(root: DataRoot, rows: list[dict], name: str = "part-a.parquet") -> None:
    if not root.exists("raw/f1/x.csv"):
        root.write_text("raw/f1/x.csv", "a,b\n1,2\n")
    write_shard(root, DATASET, DIRS["judged"], rows, name)


def test_publish_filters_shards_and_versions(root):
    rows = [judged_row(i) for i in range(7)]
    rows.append(judged_row(100, answer="word " * 1500))  # too long
    rows.append(judged_row(101, think="cafÃ© prices"))  # mojibake
    write_judged(root, rows)
    write_judged(root, rows[:2], "part-b.parquet")  # a duplicate shard of the same samples (e.g. a rerun)
    m = publish_dataset(root, "run-1", shard_rows=3)
    assert m["version"] == 1 and m["n_samples"] == 7 and m["n_judged"] == 9 and m["n_filtered"] == 2
    assert m["filtered_by_reason"] == {"length:answer_too_long": 1, "linguistic:mojibake": 1}
    assert [s["rows"] for s in m["shards"]] == [3, 3, 1]
    assert sorted(os.listdir(root.path("dataset/v1"))) == [
        "README.md",
        "files",
        "manifest.json",
        "part-00000.parquet",
        "part-00001.parquet",
        "part-00002.parquet",
    ]
    assert m["schema_version"] == DATASET.version and m["compression"] == "zstd"
    rej = {r["item_id"]: r["reason_code"] for r in read_rows(root, REJECTIONS, "rejections/filter")}
    assert rej == {"s000100": "length:answer_too_long", "s000101": "linguistic:mojibake"}
    # Same content -> same release, nothing rewritten.
    again = publish_dataset(root, "run-2", shard_rows=3)
    assert again["version"] == 1 and again["unchanged"] and again["content_hash"] == m["content_hash"]
    # New content -> next version; the old one stays intact.
    write_judged(root, [judged_row(7)], "part-c.parquet")
    m2 = publish_dataset(root, "run-3", shard_rows=3)
    assert m2["version"] == 2 and m2["n_samples"] == 8 and m2["content_hash"] != m["content_hash"]
    assert read_manifest(root, 1)["n_samples"] == 7
    assert root.read_text("dataset/LATEST").strip() == "v2"


def test_published_shards_load_with_duckdb_polars_and_datasets(root, tmp_path, monkeypatch):
    write_judged(root, [judged_row(i) for i in range(10)])
    publish_dataset(root, "run-1", shard_rows=4)
    glob = dataset_glob(root)
    import duckdb
    import polars as pl

    con = duckdb.connect()
    n, roles = con.execute(f"SELECT count(*), max(len(messages)) FROM read_parquet('{glob}')").fetchone()
    assert (n, roles) == (10, 5)
    assert con.execute(f"SELECT messages[4].role FROM read_parquet('{glob}') LIMIT 1").fetchone()[0] == "tool"
    df = pl.read_parquet(glob)
    assert df.height == 10 and df["sample_id"].is_unique().all()
    assert df.schema["messages"] == pl.List(pl.Struct({"role": pl.String, "content": pl.String}))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    import datasets

    ds = datasets.load_dataset("parquet", data_files=glob, split="train", cache_dir=str(tmp_path / "hf-cache"))
    assert len(ds) == 10
    assert ds[0]["messages"][0] == {"role": "system", "content": "You are a data analyst."}
    assert sorted(ds["sample_id"]) == [f"s{i:06d}" for i in range(10)]


CHILD = textwrap.dedent(
    """
    import sys
    from datamind.publish.stage import publish_dataset
    publish_dataset(sys.argv[1], "run-killed", shard_rows=int(sys.argv[2]))
    """
)


def test_killed_publish_leaves_no_partial_or_duplicated_shard(root, tmp_path, monkeypatch):
    n, size = 1200, 6
    write_judged(root, [judged_row(i) for i in range(n)])
    spills = tmp_path / "tmp"  # the workers' TMPDIR, where publishing spills the rows it screened
    spills.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spills))
    env = {**os.environ, "PYTHONPATH": str(REPO / "include"), "TMPDIR": str(spills)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, root.url, str(size)], env=env, cwd=str(REPO))
    vdir = Path(root.path("dataset", "v1"))
    staged = Path(root.path("staging", "dataset", "v1"))  # where a release is built before it is moved in
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and child.poll() is None:
            if staged.is_dir() and len(list(staged.glob("part-*.parquet"))) >= 5:
                break
            time.sleep(0.002)
        assert child.poll() is None, "publish finished before it could be killed; raise n"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(10)
    assert child.returncode == -signal.SIGKILL
    assert read_manifest(root) is None  # readers see no release at all ...
    assert not vdir.exists() and not list(Path(root.path()).glob("dataset/**/*.parquet"))  # ... nor any part of one
    partial = sorted(x.name for x in staged.iterdir())
    assert 0 < len([x for x in partial if x.startswith("part-")]) < n // size
    assert [x.name.split("-")[2] for x in spills.iterdir()] == [str(child.pid)]  # its spill, left by the kill
    live = spills / f"datamind-publish-{os.getpid()}-running"  # a publish still running elsewhere
    live.mkdir()

    m = publish_dataset(root, "run-rerun", shard_rows=size)
    assert m["version"] == 1  # the killed attempt's number is reused, not a second copy next to it
    assert not staged.exists()
    assert list(spills.iterdir()) == [live]  # the dead one's spill was swept, the rerun's own removed
    names = sorted(x.name for x in vdir.iterdir())
    assert names == ["README.md", "files", "manifest.json"] + [f"part-{i:05d}.parquet" for i in range(n // size)]
    assert sorted(Path(root.path("dataset")).iterdir()) == [Path(root.path("dataset", "LATEST")), vdir]
    import pyarrow.parquet as pq

    ids = [
        sid
        for x in sorted(vdir.glob("part-*.parquet"))
        for sid in pq.read_table(x, columns=["sample_id"]).column(0).to_pylist()
    ]
    assert len(ids) == n and len(set(ids)) == n
    assert all(pq.read_metadata(x).num_rows == size for x in vdir.glob("part-*.parquet"))


def test_shard_rows_must_be_positive(root):
    with pytest.raises(ValueError):
        publish_dataset(root, "r", shard_rows=0)


def test_the_card_is_parsed_as_hubs_read_it_and_counts_each_row_once(root):
    import yaml

    rows = [judged_row(i) for i in range(6)]
    write_judged(root, rows)
    m = publish_dataset(root, "run-card", shard_rows=4, test_fraction=0.5)
    text = Path(root.path("dataset", m["version_id"], "README.md")).read_text()
    header = yaml.safe_load(text.split("---\n")[1])
    files = [f for c in header["configs"] for f in c["data_files"]]
    assert [f["path"] for f in files] == ["part-*.parquet"]  # every part listed once
    assert header["dataset_info"]["splits"] == [{"name": "all", "num_examples": 6}]
    assert {f["name"] for f in header["dataset_info"]["features"]} == set(DATASET.schema.names)
    assert m["by_split"] and sum(m["by_split"].values()) == 6
    split = next(iter(m["by_split"]))  # one source file: all its rows on one side
    assert m["by_split"] == {split: 6} and "| `f1` | x.csv |" in text and f"| {split} | 6 |" in text


TEACHER = "qwen2.5-coder-0.5b-instruct"


def test_a_release_of_two_writers_counts_its_samples_per_writer_in_the_manifest_card_and_report(root):
    import html
    import re

    import duckdb
    import pandas as pd

    from datamind.publish.promotion import release_summary
    from datamind.quality.report_page import render_report
    from datamind.quality.summaries import summarize

    # the teacher wrote 3 samples whole and the trajectory of 1 offline question; the offline engine wrote 3;
    # the last row was judged before samples named their question's writer (dataset 1.1): "(none)"
    writers = [(TEACHER, TEACHER)] * 3 + [(TEACHER, "offline")] + [("offline-expert", "offline")] * 3
    rows = [judged_row(i) for i in range(8)]
    for r, (model, question_model) in zip(rows[:7], writers, strict=True):  # the 8th: model "m", no question_model
        r["model"], r["question_model"] = model, question_model
    write_judged(root, rows)
    m = publish_dataset(root, "run-writers", shard_rows=4)
    assert m["n_samples"] == 8 and m["schema_version"] == DATASET.version == "1.2"
    assert m["audit"]["samples_per_model"] == {TEACHER: 4, "offline-expert": 3, "m": 1}
    assert m["audit"]["samples_per_writers"] == {
        TEACHER: {TEACHER: 3, "offline": 1},
        "offline-expert": {"offline": 3},
        "m": {"(none)": 1},
    }
    # each published sample names both writers
    got = duckdb.sql(
        f"SELECT model, question_model, count(*) FROM '{dataset_glob(root, m['version'])}' GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    assert got == [("m", None, 1), ("offline-expert", "offline", 3), (TEACHER, "offline", 1), (TEACHER, TEACHER, 3)]
    card = Path(root.path("dataset", m["version_id"], "README.md")).read_text()
    table = card[card.index("| written by (`model`) | question by (`question_model`) | samples |") :].split("\n\n")[0]
    assert table.splitlines()[2:] == [
        f"| {TEACHER} | {TEACHER} | 3 |",
        f"| {TEACHER} | offline | 1 |",
        "| offline-expert | offline | 3 |",
        "| m | (none) | 1 |",
    ]
    # the release's report: the writers' table in its audit section, and the trajectories' writers as a chart
    summary = summarize("dataset", pd.DataFrame(read_rows(root, DATASET, f"dataset/{m['version_id']}")))
    assert summary["by_model"] == {TEACHER: 4, "offline-expert": 3, "m": 1}
    page = render_report(
        {"stage": "publish_dataset", "run_id": "run-writers", "table": "dataset", "summary": summary,
         "release": release_summary(m)},
        None,
    )  # fmt: skip
    writers = page[page.index("<h3>Samples by writer</h3>") :].split("</table>")[0]
    cells = re.findall(r"<td(?: class='num')?>(?:<a href='([^']*)'>)?([^<]*)", writers)
    assert [c[1] for c in cells] == [
        TEACHER, TEACHER, "3", TEACHER, "offline", "1", "offline-expert", "offline", "3", "m", "(none)", "1"
    ]  # fmt: skip
    assert html.unescape(cells[5][0]) == (
        f"../../../viewer/releases/{m['version_id']}/?model={TEACHER}&question_model=offline#samples"
    )
    assert "<figcaption>model</figcaption>" in page and "<figcaption>question model</figcaption>" in page


def test_held_out_files_are_stable_as_the_corpus_grows_and_a_small_corpus_still_holds_out_several():
    from datamind.publish.card import held_out_files

    big = [f"file{i:05d}" for i in range(4000)]
    held = held_out_files(big, 0.1, 2)
    assert 320 < len(held) < 480  # a tenth of the files, by hash: the minimum plays no part here
    grown = held_out_files([*big, *(f"new{i}" for i in range(4000))], 0.1, 2)
    # a file held out stays held out when files arrive, but for the few at the boundary of the fraction
    assert len(held - grown) <= 0.05 * len(held)
    assert held_out_files(big, 0.0, 2) == frozenset()  # no held-out split asked for: none

    six = [f"f{i}" for i in range(6)]
    assert len(held_out_files(six, 0.1, 2)) >= 2  # topped up: one file's quirks never make the whole split
    assert len(held_out_files(six, 0.1, 5)) == 3  # never past half of the files
    assert held_out_files(["only"], 0.1, 2) == frozenset()  # one file: it cannot be both trained and tested on
    assert held_out_files(six, 0.1, 2) == held_out_files(list(reversed(six)), 0.1, 2)  # order does not matter


def test_the_held_out_split_holds_the_configured_share_of_samples_and_joins_on_both_sides():
    """Whole files, but the share of samples the release asked for: a file that would overshoot is passed over
    (the demo held out 29% where 10% was configured), and questions over several tables land in both splits."""
    from datamind.publish.card import held_out_files

    sizes = {f"f{i:03d}": 5 + (i * 37) % 60 for i in range(60)}  # 60 files of 5 to 64 samples
    total = sum(sizes.values())
    for fraction in (0.1, 0.2, 0.3):
        held = held_out_files(sizes, fraction, 2)
        assert abs(sum(sizes[f] for f in held) / total - fraction) <= 0.02, fraction
    uneven = {"big": 70, "a": 10, "b": 8, "c": 6, "d": 4, "e": 2}  # the demo's shape: one file, a quarter or more
    held = held_out_files(uneven, 0.1, 2)
    assert "big" not in held and len(held) == 2 and sum(uneven[f] for f in held) <= 18  # 18%, not 70%
    joins = {"a", "b", "c"}
    for fraction in (0.05, 0.1, 0.5):
        held = held_out_files(sizes | dict.fromkeys(joins, 20), fraction, 2, joins)
        assert held & joins and joins - held, fraction
    # where the only join files are big, the configured share comes first: neither goes to a 10% test split
    demo = {"db1": 70, "db2": 65, "a": 10, "b": 8, "c": 6, "d": 4}
    assert not held_out_files(demo, 0.1, 2, {"db1", "db2"}) & {"db1", "db2"}


def test_a_release_over_few_files_holds_out_whole_files_and_its_hash_follows_the_split(root):
    rows = [judged_row(i) for i in range(12)]
    for r in rows:  # six source files, two samples each
        n = int(r["sample_id"][1:]) // 2
        r["file_id"], r["data_uri"] = f"f{n}", f"raw/f{n}/x{n}.csv"
        root.write_text(r["data_uri"], "a,b\n1,2\n")
    write_judged(root, rows)
    m = publish_dataset(root, "run-split", min_test_files=2)
    assert len(m["held_out_files"]) >= 2 and m["by_split"]["test"] == 2 * len(m["held_out_files"])
    import duckdb

    got = duckdb.sql(f"SELECT DISTINCT file_id FROM '{dataset_glob(root, m['version'])}' WHERE split = 'test'")
    assert {r[0] for r in got.fetchall()} == set(m["held_out_files"])
    m2 = publish_dataset(root, "run-split-2", min_test_files=3)  # same samples, other sides: new content
    assert m2["content_hash"] != m["content_hash"] and m2["version"] == m["version"] + 1
    assert len(m2["held_out_files"]) == 3


def test_no_file_gives_more_than_its_share_of_a_release(root):
    """One big file among small ones is capped at max_file_share of what the release keeps (the held-out read
    found one database at 24% and three files at half the samples); the samples beyond it are recorded as
    file_share_cap, and the audit counts the release as written."""
    from datamind.publish.stage import file_share_cap

    rows = [judged_row(i) for i in range(40)]
    for i, r in enumerate(rows):  # f0: 20 samples; f1..f5: 4 each
        n = 0 if i < 20 else 1 + (i - 20) // 4
        r["file_id"], r["data_uri"] = f"f{n}", f"raw/f{n}/x{n}.csv"
        root.write_text(r["data_uri"], "a,b\n1,2\n")
    write_judged(root, rows)
    m = publish_dataset(root, "run-cap", max_file_share=0.25)
    # f0 keeps m samples with m <= 0.25 * (m + 20): 6 (6 of 26 is 23%; 7 of 27 would be 26%)
    assert m["n_samples"] == 26 and m["filtered_by_reason"]["file_share_cap"] == 14
    assert m["audit"]["n_samples"] == 26 and m["audit"]["top_file_share"] == round(6 / 26, 4)
    rejected = read_rows(root, REJECTIONS, "rejections/filter")
    dropped = {r["item_id"] for r in rejected if r["reason_code"] == "file_share_cap"}
    assert len(dropped) == 14 and all(int(s[1:]) < 20 for s in dropped)  # only f0's samples
    assert publish_dataset(root, "run-nocap", max_file_share=1.0)["n_samples"] == 40
    assert file_share_cap({"a": 9, "b": 1, "c": 1}, 0.25) is None  # three files cannot each be under a quarter
    assert file_share_cap({f"f{i}": 5 for i in range(8)}, 0.25) is None  # nothing above the share


def test_publish_screens_in_bounded_batches_and_merges_the_runs_in_id_order(root, tmp_path, monkeypatch):
    import random

    import pyarrow.parquet as pq

    from datamind.publish import stage

    ids = list(range(300))
    random.Random(7).shuffle(ids)  # every judged shard holds ids from all over the order
    shards = [ids[i : i + 25] for i in range(0, 300, 25)]
    too_long = {ids[3], ids[100], ids[299]}

    def fill(r: DataRoot) -> None:
        for k, part in enumerate(shards):
            rows = [judged_row(i, answer="word " * 1500 if i in too_long else None) for i in part]
            write_judged(r, rows, f"part-{k:02d}.parquet")
        write_judged(r, [judged_row(i) for i in shards[4][:10]], "part-rerun.parquet")  # a rerun's duplicates

    fill(root)
    batches: list[int] = []
    real = stage.apply_filters
    monkeypatch.setattr(stage, "apply_filters", lambda rows, config: batches.append(len(rows)) or real(rows, config))
    monkeypatch.setattr(stage, "_SCREEN_ROWS", 40)
    monkeypatch.setattr(stage, "_SPILL_GROUP_ROWS", 3)
    monkeypatch.setattr(stage, "_MERGE_FAN_IN", 2)
    merges: list[int] = []
    real_merge = stage._merge_rows
    monkeypatch.setattr(stage, "_merge_rows", lambda paths: merges.append(len(paths)) or real_merge(paths))
    m = publish_dataset(root, "run-small-batches", shard_rows=7)
    # screening held at most a batch (the threshold plus the shard that crossed it), never the whole set
    assert len(batches) >= 6 and max(batches) <= 40 + 25 and sum(batches) == 300
    # the runs were merged two at a time, in passes, never all at once: a merge pass per pair, then the last
    runs = sum(1 for b in batches if b)  # a batch spills one sorted run
    assert merges == [2] * (runs - 1), merges
    assert m["n_judged"] == 300 and m["n_samples"] == 297 and m["n_filtered"] == 3
    parts = sorted(Path(root.path("dataset", "v1")).glob("part-*.parquet"))
    sizes = [pq.read_metadata(x).num_rows for x in parts]
    assert sizes == [7] * 42 + [3]
    published = [sid for x in parts for sid in pq.read_table(x, columns=["sample_id"]).column(0).to_pylist()]
    assert published == sorted(f"s{i:06d}" for i in range(300) if i not in too_long)  # in order, each once

    # the same judged rows published in one batch give the same bytes: batching changes nothing but memory
    monkeypatch.setattr(stage, "_SCREEN_ROWS", 10**6)
    other = DataRoot(str(tmp_path / "other"))
    fill(other)
    publish_dataset(other, "run-one-batch", shard_rows=7)
    for x in parts:
        assert x.read_bytes() == Path(other.path("dataset", "v1", x.name)).read_bytes(), x.name


def test_the_audit_names_the_sentence_most_samples_share(root):
    from datamind.publish.audit import audit_rows

    def sample(i: int, first: str, last: str) -> dict:
        row = judged_row(i)
        row["messages"] = row["messages"][:2] + [
            {"role": "assistant", "content": p.format_code_turn(first, f"print({i})")},
            {"role": "tool", "content": p.format_interpreter(str(i))},
            {"role": "assistant", "content": p.format_answer_turn(last, str(i))},
        ]
        return row

    rows = [
        sample(0, "Look at the file.", "Done here."),
        sample(1, "Check 5 rows.", "Done here."),
        sample(2, "Check 7 rows.", "Other end."),
        sample(3, "Check 9 rows.", "Other end."),
    ]
    figures = audit_rows(rows)
    # "Check <N> rows." is in three samples (numbers masked), first seen in the second one
    assert figures["top_sentence"] == "Check <N> rows." and figures["top_sentence_share"] == 0.75
    assert figures["distinct_first_think_ratio"] == 1.0 and figures["n_samples"] == 4
    assert figures["turns_per_hop"]["1"]["median"] == 2


def test_the_audit_counts_samples_that_load_the_same_data_twice(root):
    from datamind.publish.audit import audit_rows

    def sample(i: int, *codes: str) -> dict:
        row = judged_row(i)
        turns = []
        for code in codes:
            turns += [
                {"role": "assistant", "content": p.format_code_turn(f"Step for {code[:12]}.", code)},
                {"role": "tool", "content": p.format_interpreter("ok")},
            ]
        row["messages"] = (
            row["messages"][:2] + turns + [{"role": "assistant", "content": p.format_answer_turn("So.", "1")}]
        )
        return row

    read = "df = pd.read_csv('sales.csv', sep=';')"
    rows = [
        sample(0, read + "\nprint(df.shape)", "print(df['units'].sum())"),  # reads once, then uses df
        sample(1, "df = pd.read_csv('sales.csv')", read),  # a default read, then a corrected one: two reads
        sample(2, read, "x = 1\n" + read.replace("sep=';'", "sep = ';'").replace("=", " = ", 1)),  # same call
        sample(
            3, "execute_sql(sql='SELECT 1', output_path='a.csv')", "execute_sql(sql='SELECT 1', output_path='a.csv')"
        ),
    ]
    figures = audit_rows(rows)
    assert figures["repeated_read_share"] == 0.5  # samples 2 and 3


def test_the_audit_counts_cells_that_only_compare_two_numbers(root):
    """A yes/no comparison of the previous result with a fixed number is a judgement, not code to run; checks
    that still read the data (against the row count, in SQL over a table) are real computations."""
    from datamind.publish.audit import audit_rows

    def sample(i: int, code: str) -> dict:
        row = judged_row(i)
        row["messages"] = row["messages"][:2] + [
            {"role": "assistant", "content": p.format_code_turn("Check it.", code)},
            {"role": "tool", "content": p.format_interpreter("No")},
            {"role": "assistant", "content": p.format_answer_turn("So.", "No")},
        ]
        return row

    sql = "WITH r AS (SELECT * FROM \"orders\")\nSELECT CASE WHEN 25.0 > 50.0 THEN 'Yes' ELSE 'No' END"
    rows = [
        sample(0, "answer = 'Yes' if 27.78 > 50.0 else 'No'\nprint(answer)"),
        sample(1, f"print(run_sql({sql!r}, 'hop3_result.csv'))"),  # quotes escaped inside the Python string
        sample(2, "answer = 'Yes' if 26 > len(df) / 2 else 'No'\nprint(answer)"),
        sample(3, "print(run_sql(\"SELECT CASE WHEN 3 > COUNT(*) / 2.0 THEN 'Yes' ELSE 'No' END FROM t\", 'a.csv'))"),
    ]
    assert "\\'Yes\\'" in rows[1]["messages"][2]["content"]
    figures = audit_rows(rows)
    assert figures["literal_check_share"] == 0.5  # samples 0 and 1


def _dataset_entries(root: DataRoot) -> list[str]:
    return sorted(os.listdir(root.path("dataset"))) if root.exists("dataset") else []


def test_a_publish_whose_judged_rows_are_all_filtered_writes_no_release_and_says_why(root):
    from datamind.publish.stage import NothingToPublish

    write_shard(root, DATASET, "judged/params=aa", [judged_row(i) for i in range(3)], "part-a.parquet")
    root.write_text("raw/f1/x.csv", "a,b\n1,2\n")
    assert publish_dataset(root, "run-1", judged_partition="params=aa")["version"] == 1
    bad = [judged_row(10, answer="word " * 1500), judged_row(11, answer="word " * 1500), judged_row(12, think="cafÃ©")]
    write_shard(root, DATASET, "judged/params=bb", bad, "part-b.parquet")
    with pytest.raises(NothingToPublish) as caught:
        publish_dataset(root, "run-2", judged_partition="params=bb")
    message = str(caught.value)
    assert "publish_dataset" in message and "all 3 judged rows of judged/params=bb/" in message
    assert "length:answer_too_long: 2, linguistic:mojibake: 1" in message and "LATEST stays v1" in message
    # nothing written or promoted: v1 is still the only release and the newest
    assert _dataset_entries(root) == ["LATEST", "v1"] and root.read_text("dataset/LATEST").strip() == "v1"
    assert not root.exists("staging", "dataset", "v2")
    # the drops are recorded all the same, as every publish records them
    rejected = {r["item_id"] for r in read_rows(root, REJECTIONS, "rejections/filter")}
    assert {"s000010", "s000011", "s000012"} <= rejected


def test_with_no_judged_row_the_error_names_the_stage_upstream_that_produced_nothing(root, tmp_path):
    from datamind.publish.stage import NothingToPublish
    from datamind.schemas import CATALOG_FILES, CATALOG_TABLES, QUERIES, rejection
    from datamind.synth.rows import query_row

    def fails(r: DataRoot) -> str:
        with pytest.raises(NothingToPublish) as caught:
            publish_dataset(r, "run-1")
        assert _dataset_entries(r) == []  # no release, no LATEST
        return str(caught.value)

    def rejected(stage: str, codes: list[str]) -> None:
        rows = [rejection(stage, f"{stage}-{i}", code, "why", created_at=NOW) for i, code in enumerate(codes)]
        write_shard(root, REJECTIONS, f"rejections/{stage}", rows, "part-0.parquet")

    assert "nothing was ingested" in fails(root)

    files = [
        {"file_id": f"f{i}", "source": "s", "source_uri": f"/in/{i}.csv", "rel_path": f"{i}.csv", "format": "csv"}
        | {"status": "rejected", "reason_code": code, "content_sha256": str(i), "size_bytes": 1, "ingested_at": NOW}
        for i, code in enumerate(["too_few_rows", "too_few_rows", "unloadable"])
    ]
    write_shard(root, CATALOG_FILES, "catalog/files", files, "part-0.parquet")
    message = fails(root)
    assert "ingestion accepted none of the 3 files" in message and "too_few_rows: 2, unloadable: 1" in message

    table = {"table_id": "t1", "file_id": "f0", "source": "s", "format": "csv", "table_name": "sales"}
    table |= {"n_rows": 10, "n_cols": 2, "staged_uri": "raw/s/f0/0.csv", "profiled_at": NOW}
    write_shard(root, CATALOG_TABLES, "catalog/tables", [table, {**table, "table_id": "t2"}], "part-0.parquet")
    rejected("synthesis", ["table_unreadable", "table_unreadable", "near_duplicate"])
    message = fails(root)
    assert "synthesize_queries wrote no row to queries/ from the 2 tables in catalog/tables/" in message
    assert "by reason: table_unreadable: 2, near_duplicate: 1" in message

    common = {"fingerprint": "fp", "table": table, "tables": ["sales"], "category": "counting", "parents": []}
    common |= {"description": None, "lang": "python", "solution": "print(10)", "answer": "10", "model": None}
    queries = [
        query_row(
            **common, hop=1, root_id=None, question=f"How many rows, {i}?", backend="offline", template_version="t"
        )
        for i in range(4)
    ]
    write_shard(root, QUERIES, "queries/params=fp", queries, "part-0.parquet")
    rejected("rollout", ["no_reference_solution"] * 3 + ["sandbox_error"])
    message = fails(root)
    assert "sample_trajectories wrote no row to trajectories/ from the 4 queries in queries/" in message
    assert "by reason: no_reference_solution: 3, sandbox_error: 1" in message


def test_a_rerun_whose_samples_an_earlier_release_holds_stays_a_quiet_noop(root):
    write_judged(root, [judged_row(i) for i in range(4)])
    first = publish_dataset(root, "run-1")
    root.remove("raw/f1/x.csv")  # the release carries its own copy; the staged original may go
    again = publish_dataset(root, "run-2")
    assert again["unchanged"] and again["version"] == 1 and again["content_hash"] == first["content_hash"]
    assert _dataset_entries(root) == ["LATEST", "v1"] and root.read_text("dataset/LATEST").strip() == "v1"


def test_the_dag_fails_a_run_with_nothing_to_publish_and_announces_nothing(airflow_db, root, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    monkeypatch.setenv("DATAMIND_DATA_ROOT", root.url)
    write_judged(root, [judged_row(i, answer="word " * 1500) for i in range(2)])
    dag = DagBag(dag_folder=str(REPO / "dags" / "publish_dataset.py")).dags["publish_dataset"]
    with create_session() as session:
        before = session.query(AssetEvent).count()
    run = dag.test()
    tasks = {t.task_id: t for t in run.get_task_instances()}
    task = tasks["publish"]
    assert run.state == "failed" and task.state == "failed" and task.try_number == 1  # no retries: it would not help
    assert not any(t.state == "success" for t in tasks.values())  # nothing was promoted or asked about
    assert _dataset_entries(root) == []
    with create_session() as session:
        assert session.query(AssetEvent).count() == before


SCHEMA_PRINT = (
    "Database: atlas.sqlite\n\nTable City (9 rows)\n  - ID INTEGER PRIMARY KEY\n  - Name TEXT\n"
    "  - CountryCode TEXT\n  - Population INTEGER\n  - Temperature REAL\n  foreign key CountryCode -> Country.Code\n\n"
    "Table Country (3 rows)\n  - Code TEXT PRIMARY KEY\n  - Name TEXT\n  - Population INTEGER\n"
)


def test_the_audit_counts_questions_the_agent_cannot_answer_or_should_not_ask(root):
    """The four ways today's database samples misled: a name no table has, "the table" of several, a key
    measured, a temperature totalled; a grounded question of each kind passes."""
    from datamind.publish.audit import audit_rows

    def sample(i: int, question: str) -> dict:
        row = judged_row(i)
        row.update(question=question, data_format="sqlite", data_uri="files/atlas.sqlite")
        row["messages"] = row["messages"][:2] + [
            {"role": "assistant", "content": p.format_code_turn("Schema first.", "print(get_db_info())")},
            {"role": "tool", "content": p.format_interpreter(SCHEMA_PRINT)},
            {"role": "assistant", "content": p.format_answer_turn("So.", "1")},
        ]
        return row

    rows = [
        sample(0, "Which Country_Name value has the most records?"),
        sample(1, "How many rows and columns does the table have?"),
        sample(2, "In the City table, what is the median ID?"),
        sample(3, "In the City table, what is the total Temperature of cities with CountryCode 'ABC'?"),
        sample(4, "In the City table, which Country.Name has the highest average Population?"),
        sample(5, "In the City table, what is the average Temperature of cities with CountryCode 'ABC'?"),
        sample(6, "What is the median Population of the Country table?"),
        sample(7, "What is the median Population?"),  # City's or Country's?
    ]
    figures = audit_rows(rows)
    assert figures["unknown_name_share"] == 0.125
    assert figures["unresolved_table_share"] == 0.375  # samples 0, 1 and 7 name no table
    assert figures["identifier_measure_share"] == 0.125
    assert figures["nonadditive_sum_share"] == 0.125
    assert {m.split(" =")[0] for m in figures["misses"]} >= {
        "unknown_name_share", "unresolved_table_share", "identifier_measure_share", "nonadditive_sum_share"
    }  # fmt: skip


def test_the_audit_counts_a_fix_that_changes_nothing(root):
    """A thought that says it re-reads the file to deal with 'Unnamed: 5', then the same read printing the same
    column: the model would learn to claim a fix. A re-read that drops the column is a real fix."""
    from datamind.publish.audit import audit_rows

    before = "shape: (3, 6)\nX  float64\nUnnamed: 5  float64"
    think = "The last column 'Unnamed: 5' has no name; I read it again with separator ','."

    def sample(i: int, after: str) -> dict:
        row = judged_row(i)
        row["messages"] = row["messages"][:2] + [
            {"role": "assistant", "content": p.format_code_turn("A plain read.", "df = pd.read_csv('a.csv')")},
            {"role": "tool", "content": p.format_interpreter(before)},
            {"role": "assistant", "content": p.format_code_turn(think, "df = pd.read_csv('a.csv', sep=',')")},
            {"role": "tool", "content": p.format_interpreter(after)},
            {"role": "assistant", "content": p.format_answer_turn("So.", "1")},
        ]
        return row

    figures = audit_rows([sample(0, before), sample(1, "shape: (3, 5)\nX  float64")])
    assert figures["unchanged_fix_share"] == 0.5


def test_the_audit_judges_copied_questions_answer_forms_file_concentration_and_the_split(root):
    """The issue-46 figures: thoughts that restate the question, answers not of the asked form, one file's share
    of the release and the held-out share against the configured fraction; file figures are judged only on a
    release of 10+ files (whole files cannot spread or split a few-file release at will)."""
    from datamind.publish.audit import audit_rows, verdicts

    question = "How many orders were shipped to Lyon in March of last year?"

    def sample(i: int, file_id: str, think: str, answer: str) -> dict:
        row = judged_row(i)
        row.update(file_id=file_id, question=question, final_answer=answer)
        row["messages"] = row["messages"][:2] + [
            {"role": "assistant", "content": p.format_code_turn(think, f"print({i})")},
            {"role": "tool", "content": p.format_interpreter(answer)},
            {"role": "assistant", "content": p.format_answer_turn("That is the count.", answer)},
        ]
        return row

    copy = "For how many orders were shipped to Lyon in March, I filter first."  # 6 question words in a row
    rows = [sample(i, f"f{i % 4}", copy if i < 3 else "Filter on the city, then count.", "12") for i in range(11)]
    rows.append(sample(11, "f0", "Count the shipped rows.", "12.0"))  # a count printed as a float
    figures = audit_rows(rows, held_out={"f1"}, test_fraction=0.1)
    # 12 samples of 2 thoughts each: 3 of 24 thoughts copy the question
    assert figures["question_copy_share"] == 0.125 and len(figures["examples"]["question_copy_share"]) == 3
    assert figures["answer_form_mismatch_share"] == round(1 / 12, 4)
    assert figures["top_file_share"] == round(4 / 12, 4) and figures["n_files"] == 4  # f0: samples 0, 4, 8, 11
    assert figures["test_split_share"] == 0.25 and figures["split_fraction_gap"] == 0.15  # f1: 1, 5, 9
    by_name = {v["name"]: v for v in verdicts(figures)}
    assert by_name["question_copy_share"]["ok"] is False and by_name["answer_form_mismatch_share"]["ok"] is False
    assert by_name["top_file_share"]["ok"] is None and "10+ files" in by_name["top_file_share"]["why_not_judged"]
    many = audit_rows([sample(i, f"f{i}", "Count.", "3") for i in range(20)], held_out={"f0", "f1"}, test_fraction=0.1)
    judged = {v["name"]: v["ok"] for v in verdicts(many)}
    assert judged["top_file_share"] is True and judged["split_fraction_gap"] is True  # 1/20 each, 2/20 held out


def test_yield_holds_the_offline_engine_to_its_bar_and_reports_a_models_acceptance_rate(tmp_path):
    """A query of the offline engine's that publishes nothing is a defect; a model's questions are meant to be
    filtered, so theirs is reported (``model_yield``) and not held to the engine's bar."""
    from datamind.publish.audit import Synthesised, audit_rows, verdicts
    from datamind.schemas import QUERIES

    root = DataRoot(str(tmp_path / "data"))
    queries = [
        {"query_id": f"q{i}", "file_id": "f1", "category": "counting", "hop": 1, "question": f"Q{i}?",
         "backend": "offline" if i < 4 else "llm", "model": None if i < 4 else "qwen", "created_at": NOW}
        for i in range(10)
    ]  # fmt: skip
    write_shard(root, QUERIES, DIRS["queries"], queries, "part-a.parquet")
    synthesised = Synthesised.of(root)
    assert synthesised == Synthesised({"counting": 4}, 6)

    def row(i, question_model):
        return {**judged_row(i), "category": "counting", "question_model": question_model}

    # all four engine questions published, one of the six a model wrote
    figures = audit_rows([row(0, "offline"), row(1, "offline"), row(2, None), row(3, "offline"), row(4, "qwen")],
                         synthesised)  # fmt: skip
    assert figures["yield"] == 1.0 and figures["model_yield"] == round(1 / 6, 4)
    assert "yield" not in {m.split(" =")[0] for m in figures["misses"]}
    # an engine question lost is a miss, whatever the model wrote
    lost = audit_rows([row(0, "offline"), row(4, "qwen"), row(5, "qwen")], synthesised)
    assert lost["yield"] == 0.25 and {v["name"]: v["ok"] for v in verdicts(lost)}["yield"] is False
    # a release a model wrote alone has no engine yield to judge
    assert "yield" not in audit_rows([row(4, "qwen")], Synthesised({}, 6))


def test_a_mixed_release_holds_both_writers_and_one_set_of_answers_per_query(root):
    """Off by default: two judging configurations are an error without a choice; mixed, every partition's
    samples are published, and a query judged in both keeps the first partition's samples only."""
    offline = [judged_row(i) for i in range(4)]
    for r in offline:
        r["model"], r["question_model"] = "offline-expert", "offline"
    teacher = [judged_row(i) for i in range(3, 7)]  # query q3 was judged in both partitions
    for r in teacher:
        r["sample_id"], r["trajectory_id"] = "t-" + r["sample_id"], "t-" + r["trajectory_id"]
        r["model"] = r["question_model"] = TEACHER
    root.write_text("raw/f1/x.csv", "a,b\n1,2\n")
    write_shard(root, DATASET, "judged/params=aa", offline, "part-a.parquet")
    write_shard(root, DATASET, "judged/params=bb", teacher, "part-b.parquet")
    with pytest.raises(ValueError, match="mix_partitions"):
        publish_dataset(root, "run-1")
    m = publish_dataset(root, "run-1", mix_partitions=True)
    assert m["audit"]["samples_per_model"] == {"offline-expert": 4, TEACHER: 3}
    got = read_rows(root, DATASET, f"dataset/{m['version_id']}")
    assert sorted(r["query_id"] for r in got) == ["q0", "q1", "q2", "q3", "q4", "q5", "q6"]  # q3 once
    assert next(r["model"] for r in got if r["query_id"] == "q3") == "offline-expert"
    assert set(m["judge_params"]) == {"params=aa", "params=bb"}
    dup = [r for r in read_rows(root, REJECTIONS, "rejections/filter") if r["item_id"] == "t-s000003"]
    assert [r["reason_code"] for r in dup] == ["duplicate_query"] and m["filtered_by_reason"] == {"duplicate_query": 1}
    # one partition named: the other's samples stay out, as before
    only = publish_dataset(root, "run-2", judged_partition="params=bb")
    assert only["audit"]["samples_per_model"] == {TEACHER: 4}
