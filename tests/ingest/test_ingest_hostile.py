"""Hostile and broken files cost only themselves: each gets a catalog row with a reason that names the cause,
good files in the same shard are accepted, and the ingesting process survives (readers run in a capped child)."""

from __future__ import annotations

import os
import resource
import shutil
from collections import Counter
from pathlib import Path

import pytest
from hostile_files import CORPUS, write_corpus
from ingest_builders import table_rows, write_csv, xlsx_bytes
from test_ingest_stage import SAMPLES, catalog, run_ingest

from datamind.formats.parse_worker import IsolatedParser, ParseLimit
from datamind.settings import Limits


def test_hostile_files_in_one_shard_cost_only_themselves(root, tmp_path: Path):
    folder = tmp_path / "drop"
    write_corpus(folder)
    write_csv(folder / "good_orders.csv", 40)
    (folder / "good_book.xlsx").write_bytes(xlsx_bytes({"Sheet1": [["id", "city", "amount"], *table_rows(40)]}))
    shutil.copy(SAMPLES / "sales_orders.csv", folder / "good_sales.csv")
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # One shard holds everything: a reader crash must not take the good files' rows with it.
    specs, summaries = run_ingest(root, folder, "drop", shard_size=100)
    assert len(specs) == 1
    rows = {r["rel_path"]: r for r in catalog(root)}
    assert set(rows) == {b.name for b in CORPUS} | {"good_orders.csv", "good_book.xlsx", "good_sales.csv"}
    for name in ("good_orders.csv", "good_book.xlsx", "good_sales.csv"):
        assert rows[name]["status"] == "accepted", (name, rows[name]["reason"])
    tally = Counter()
    for bad in CORPUS:
        row = rows[bad.name]
        assert row["status"] == "rejected", bad.name
        assert row["reason_code"] in bad.reasons, (bad.name, row["reason_code"], row["reason"])
        assert bad.says in row["reason"].lower(), (bad.name, row["reason"])
        tally["rejected with reason"] += 1
    tally["lost"] = len(CORPUS) - tally["rejected with reason"]
    tally["accepted good files"] = 3
    # The parent never parsed a bomb itself: its peak RSS grew by far less than any of them would cost.
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert grown_mb < 1024, grown_mb
    print(f"\nbad-file corpus tally: {dict(tally)} (parent peak RSS grew {grown_mb:.0f} MB)")
    # A rerun plans nothing: every file, hostile or not, is cataloged exactly once.
    again, _ = run_ingest(root, folder, "drop", shard_size=100)
    assert again == [] and len(catalog(root)) == len(rows)


def test_a_reader_crash_is_recorded_and_the_next_file_gets_a_fresh_child(tmp_path: Path):
    bad = next(b for b in CORPUS if b.name == "far_corner_undeclared.xlsx")
    bad.write(tmp_path / bad.name)
    good = write_csv(tmp_path / "good.csv", 40)
    with IsolatedParser(Limits(parse_memory_mb=1536)) as parser:
        crashed = parser.load(str(tmp_path / bad.name))
        after = parser.load(str(good))
    assert crashed.error_code == "parse_limit"
    assert "SIGABRT" in crashed.error and "memory allocation" in crashed.error, crashed.error
    assert parser.crashes == 1
    assert after.error_code is None and after.tables[0].n_rows == 40


def test_a_call_in_the_child_answers_raises_as_itself_and_costs_only_itself_past_the_caps(tmp_path: Path):
    """``IsolatedParser.call`` (a later stage's own reading of a staged file): the function's result or its
    exception comes back; an allocation past the memory cap or a dead child is a ParseLimit, the next call
    gets a fresh child."""
    data = tmp_path / "five.bin"
    data.write_bytes(b"12345")
    limits = Limits()
    with IsolatedParser(limits) as parser:
        assert parser.call(os.path.getsize, str(data)) == 5
        with pytest.raises(FileNotFoundError):  # the child's own exception, as itself
            parser.call(os.path.getsize, str(tmp_path / "gone.bin"))
        with pytest.raises(ParseLimit, match=f"{limits.parse_memory_mb:,} MB memory cap"):
            parser.call(bytearray, (limits.parse_memory_mb + 1) * 1024 * 1024)
        with pytest.raises(ParseLimit, match="SIGABRT"):
            parser.call(os.abort)
        assert parser.call(os.path.getsize, str(data)) == 5  # a fresh child after the crash
    assert parser.crashes == 1


def test_a_file_that_spins_is_stopped_by_the_cpu_cap(tmp_path: Path):
    # Every tenth row has an unquoted comma in a value: the repair pass walks the rows in Python, about
    # 9 s of CPU for 1.5M rows on the dev box, far past this one-second budget.
    path = tmp_path / "long.csv"
    with path.open("w") as fh:
        fh.write("id,city,amount,day\n")
        fh.writelines(f"{i},{'Lyon, FR' if i % 10 == 0 else 'Graz'},{i * 1.5},2024-01-01\n" for i in range(1_500_000))
    with IsolatedParser(Limits(parse_cpu_s=1, max_file_bytes=1 << 30)) as parser:
        result = parser.load(str(path))
    assert result.error_code == "parse_limit" and "1 s CPU cap" in result.error, result.error


def test_entries_that_cannot_be_read_each_get_their_own_row_and_cost_nothing_else(root, tmp_path: Path):
    """A symlink cycle, a dangling link, a name that is not UTF-8, a FIFO named like a CSV and a name too long
    to stage used to fail (or hang) the whole listing or run; each is now one rejected row with its reason,
    never opened, and the good files beside them are ingested."""
    import os
    import time

    folder = tmp_path / "drop"
    folder.mkdir()
    write_csv(folder / "good_orders.csv", 40)
    (folder / "good_book.xlsx").write_bytes(xlsx_bytes({"Sheet1": [["id", "city", "amount"], *table_rows(40)]}))
    shutil.copy(SAMPLES / "sales_orders.csv", folder / "good_sales.csv")
    os.symlink("loop_b.csv", folder / "loop_a.csv")
    os.symlink("loop_a.csv", folder / "loop_b.csv")
    os.symlink("gone.csv", folder / "dangling.csv")
    (Path(os.fsdecode(bytes(folder) + b"/caf\xe9_latin1.csv"))).write_text("a,b\n1,2\n")
    os.mkfifo(folder / "pipe.csv")
    write_csv(folder / ("n" * 230 + ".csv"), 40)
    os.symlink(tmp_path / "elsewhere.csv", folder / "outside.csv")
    write_csv(tmp_path / "elsewhere.csv", 40)
    before = sorted(os.listdir(os.fsencode(folder)))
    started, rss_before = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    specs, _ = run_ingest(root, folder, "drop", shard_size=100)
    wall_s = time.monotonic() - started
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    rows = {r["rel_path"]: r for r in catalog(root)}
    for good in ("good_orders.csv", "good_book.xlsx", "good_sales.csv"):
        assert rows[good]["status"] == "accepted", rows[good]
    assert sorted(os.listdir(os.fsencode(folder))) == before  # nothing written into the source folder
    want = {
        "loop_a.csv": "unreadable_entry",
        "loop_b.csv": "unreadable_entry",
        "dangling.csv": "unreadable_entry",
        "caf\\xe9_latin1.csv": "undecodable_name",
        "pipe.csv": "not_a_regular_file",
        "n" * 230 + ".csv": "name_too_long",
        "outside.csv": "unsafe_path",
    }
    for name, code in want.items():
        assert rows[name]["status"] == "rejected" and rows[name]["reason_code"] == code, (name, rows[name])
    assert len(rows) == len(want) + 3
    print(f"\nhostile folder: {len(want)} bad entries, 3 good files: {wall_s:.1f} s, parent RSS grew {grown_mb:.0f} MB")
    again, _ = run_ingest(root, folder, "drop", shard_size=100)
    assert again == []  # each bad entry is cataloged once, like any file


def test_a_zip_with_two_members_of_one_name_loses_neither(root, tmp_path: Path):
    import warnings
    import zipfile

    archive = tmp_path / "two.zip"
    with warnings.catch_warnings(), zipfile.ZipFile(archive, "w") as zf:
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name it is asked to write
        zf.writestr("orders.csv", (SAMPLES / "sales_orders.csv").read_text())
        zf.writestr("orders.csv", "a,b\n1,2\n")
    run_ingest(root, archive, "two", shard_size=100)
    rows = {r["rel_path"]: r for r in catalog(root)}
    assert rows["orders.csv"]["reason_code"] != "duplicate_member"
    (dup,) = [r for r in rows.values() if r["reason_code"] == "duplicate_member"]
    assert dup["rel_path"].startswith("orders.csv#") and "second archive member" in dup["reason"]


def _plan(root, source_uri, name):
    from datamind.ingest.sources import list_source_files
    from datamind.ingest.stage import plan_ingest

    return plan_ingest(root, list_source_files(str(source_uri), Limits()), name, 100)


def _ingest(root, specs):
    from datamind.ingest.stage import ingest_shard

    return [ingest_shard(root, s, Limits(), "run-1") for s in specs]


def _staged_bytes(root) -> list[bytes]:
    return [p.read_bytes() for p in Path(root.path("raw")).rglob("*") if p.is_file()]


def test_a_file_swapped_for_a_link_after_planning_is_never_followed(root, tmp_path: Path):
    import os

    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secrets.csv"
    write_csv(secret, 40)
    secret_bytes = secret.read_bytes()
    for source, name in ((tmp_path / "drop", "drop"), (f"{tmp_path}/globbed/*.csv", "globbed")):
        folder = Path(str(source).split("*")[0])
        folder.mkdir()
        write_csv(folder / "benign.csv", 30)
        specs = _plan(root, source, name)
        (folder / "benign.csv").unlink()
        os.symlink(secret, folder / "benign.csv")  # the swap, between planning and the shard's one read
        _ingest(root, specs)
        (row,) = [r for r in catalog(root) if r["source"] == name]
        assert (row["status"], row["reason_code"]) == ("rejected", "unsafe_path"), row
    assert secret_bytes not in _staged_bytes(root)


def test_a_file_rewritten_after_planning_is_recorded_and_its_new_content_ingested_next(root, tmp_path: Path):
    folder = tmp_path / "drop"
    folder.mkdir()
    write_csv(folder / "orders.csv", 30)
    specs = _plan(root, folder, "drop")
    write_csv(folder / "orders.csv", 45)  # new bytes: the planned hash no longer describes the file
    _ingest(root, specs)
    (first,) = catalog(root)
    assert (first["status"], first["reason_code"]) == ("rejected", "source_changed"), first
    _ingest(root, _plan(root, folder, "drop"))
    (accepted,) = [r for r in catalog(root) if r["status"] == "accepted"]
    assert accepted["n_rows"] == 45 and (folder / "orders.csv").read_bytes() in _staged_bytes(root)


def _folder_state(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


def test_sqlite_in_wal_mode_is_read_as_a_copy_and_a_pending_log_is_named(root, tmp_path: Path):
    import contextlib
    import sqlite3

    folder = tmp_path / "dbs"
    folder.mkdir()
    build = tmp_path / "build"
    build.mkdir()

    def wal_database(path: Path, n: int) -> sqlite3.Connection:
        """A WAL-mode database whose rows stay in its log while the returned connection is open."""
        con = sqlite3.connect(path)
        con.executescript("PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;")
        con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, city TEXT, amount REAL)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?)", table_rows(n))
        con.commit()
        return con

    # A database whose rows live only in its write-ahead log, copied while the writer holds it open.
    with contextlib.closing(wal_database(build / "live.sqlite", 80)):
        shutil.copy(build / "live.sqlite", folder / "live.sqlite")
        shutil.copy(build / "live.sqlite-wal", folder / "live.sqlite-wal")
    # The same kind of database, checkpointed when closed: WAL mode in its header, no log beside it.
    wal_database(folder / "quiet.sqlite", 50).close()
    assert not (folder / "quiet.sqlite-wal").exists()
    before = _folder_state(folder)
    _ingest(root, _plan(root, folder, "dbs"))
    rows = {r["rel_path"]: r for r in catalog(root)}
    assert rows["live.sqlite"]["reason_code"] == "sqlite_wal_pending", rows["live.sqlite"]
    assert "live.sqlite-wal" in rows["live.sqlite"]["reason"]
    assert (rows["quiet.sqlite"]["status"], rows["quiet.sqlite"]["n_rows"]) == ("accepted", 50)
    assert _folder_state(folder) == before  # ingest wrote nothing beside the sources (no -shm, no -wal)


def test_an_xml_entity_bomb_in_a_workbook_is_named_for_what_it_is(root, tmp_path: Path):
    import io
    import zipfile

    good = xlsx_bytes({"Sheet1": [["id", "city", "amount"], *table_rows(30)]})
    bomb = (
        '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;">'
        '<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;">]>'
    )
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(good)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "xl/worksheets/sheet1.xml":
                data = data.replace(b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>', b"", 1)
                data = bomb.encode() + data.replace(b'<c r="B2"', b'<c r="B2"', 1)
            dst.writestr(info, data)
    folder = tmp_path / "books"
    folder.mkdir()
    (folder / "laughs.xlsx").write_bytes(out.getvalue())
    _ingest(root, _plan(root, folder, "books"))
    (row,) = catalog(root)
    assert (row["status"], row["reason_code"]) == ("rejected", "unsafe_xml"), row
    assert "entity" in row["reason"].lower()


def test_a_benchmark_file_that_breaks_the_reader_costs_only_itself_when_indexing(tmp_path: Path):
    """Decontamination reads benchmark folders a deployment points it at: the same untrusted files, parsed in
    the same capped child (the sparse-workbook bomb used to abort the indexing process itself)."""
    import json

    from datamind.decontamination import build_index

    folder = tmp_path / "dabench"
    tables = folder / "da-dev-tables"
    tables.mkdir(parents=True)
    bad = next(b for b in CORPUS if b.name == "far_corner_undeclared.xlsx")
    bad.write(tables / "corner.xlsx")
    write_csv(tables / "orders.csv", 40)
    questions = [
        {"id": 1, "question": "How many rows does the corner sheet have?", "file_name": "corner.xlsx"},
        {"id": 2, "question": "What is the mean amount of the orders?", "file_name": "orders.csv"},
    ]
    (folder / "da-dev-questions.jsonl").write_text("\n".join(json.dumps(q) for q in questions))
    (folder / "da-dev-labels.jsonl").write_text(
        "\n".join(json.dumps({"id": q["id"], "common_answers": [["n", "1"]]}) for q in questions)
    )
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    index = build_index({"dabench": str(folder)})
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert [t["item"] for t in index.tables] == ["dabench:orders.csv"]  # the bomb adds no table
    assert len(index.file_sha) == 2  # but its bytes are still matched exactly
    assert grown_mb < 512, grown_mb
