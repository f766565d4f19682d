"""The real messy corpus in ../shared/data: every file ends up accepted or rejected for the right reason.

Expected values come from independent readings of the same files (plain pandas, sqlite3, the raw text),
never from the code under test. Skipped when the corpus is absent.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from datamind.assets import DIRS
from datamind.ingest.sources import list_source_files
from datamind.ingest.stage import ingest_shard, plan_ingest
from datamind.profile.stage import plan_profile, profile_shard
from datamind.schemas import CATALOG_FILES, CATALOG_TABLES
from datamind.settings import Limits
from datamind.shards import read_rows
from datamind.storage import DataRoot

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
pytestmark = pytest.mark.corpus
SOURCES = {"dabench": "dabench/da-dev-tables", "sqlite": "sqlite", "xlsx": "xlsx", "messy": "messy_csv"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    if not DATA.is_dir():
        pytest.skip(f"shared corpus not present at {DATA}")
    root = DataRoot(str(tmp_path_factory.mktemp("corpus") / "root"))
    limits = Limits()
    for name, rel in SOURCES.items():
        for spec in plan_ingest(root, list_source_files(str(DATA / rel), limits), name, 25):
            ingest_shard(root, spec, limits, "corpus")
    for spec in plan_profile(root, 25):
        profile_shard(root, spec, "corpus")
    files = read_rows(root, CATALOG_FILES, DIRS["catalog_files"])
    tables = read_rows(root, CATALOG_TABLES, DIRS["catalog_tables"])
    return root, files, tables


def by_source(files, source):
    return {r["rel_path"]: r for r in files if r["source"] == source}


def test_every_corpus_file_is_cataloged_exactly_once(corpus):
    _, files, _ = corpus
    for name, rel in SOURCES.items():
        on_disk = sorted(str(p.relative_to(DATA / rel)) for p in (DATA / rel).rglob("*") if p.is_file())
        assert sorted(by_source(files, name)) == on_disk, name
    assert len({r["file_id"] for r in files}) == len(files)


def test_dabench_32_accepted_20_too_large(corpus):
    _, files, tables = corpus
    rows = by_source(files, "dabench")
    assert len(rows) == 52
    expected_counts = {name: len(pd.read_csv(DATA / SOURCES["dabench"] / name)) for name in rows}
    accepted = {n for n, r in rows.items() if r["status"] == "accepted"}
    assert accepted == {n for n, c in expected_counts.items() if 20 <= c <= 1000}
    assert len(accepted) == 32
    rejected = {n: r for n, r in rows.items() if r["status"] == "rejected"}
    assert len(rejected) == 20
    for name, r in rejected.items():
        assert r["reason_code"] == "too_many_rows", name
        assert r["table_verdicts"][0]["n_rows"] == expected_counts[name], name
    profiled = {t["file_id"] for t in tables}
    assert {rows[n]["file_id"] for n in accepted} <= profiled


def test_dabench_profiles_match_pandas(corpus):
    _, files, tables = corpus
    rows = by_source(files, "dabench")
    by_file = {t["file_id"]: t for t in tables}
    titanic = by_file[rows["titanic.csv"]["file_id"]]
    df = pd.read_csv(DATA / SOURCES["dabench"] / "titanic.csv")
    assert titanic["columns"] == list(df.columns) and titanic["n_rows"] == len(df)
    fare = next(p for p in titanic["column_profiles"] if p["name"] == "Fare")
    assert fare["mean"] == pytest.approx(df["Fare"].mean()) and fare["std"] == pytest.approx(df["Fare"].std())
    age = next(p for p in titanic["column_profiles"] if p["name"] == "Age")
    assert age["n_null"] == int(df["Age"].isna().sum())
    meta = json.loads(titanic["meta_info"])
    assert sorted(meta["unique"]["Embarked"]) == sorted(df["Embarked"].dropna().unique())
    # Current_Logan.csv opens with a title row ("JAMES LOGAN,,,"); the real header is the second line.
    logan = by_file[rows["Current_Logan.csv"]["file_id"]]
    assert logan["columns"][:4] == ["Wins", "Name", "Code", "School"]
    assert logan["n_rows"] == len(pd.read_csv(DATA / SOURCES["dabench"] / "Current_Logan.csv", skiprows=1))


def test_spider_databases_accepted_with_their_large_tables(corpus):
    _, files, tables = corpus
    rows = by_source(files, "sqlite")
    dbs = {n: r for n, r in rows.items() if n.endswith(".sqlite")}
    assert len(dbs) == 7 and all(r["status"] == "accepted" and r["format"] == "sqlite" for r in dbs.values())
    for name, r in dbs.items():
        con = sqlite3.connect(f"file:{DATA / 'sqlite' / name}?mode=ro", uri=True)
        names = [n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY rowid")]
        counts = {n: con.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0] for n in names}
        fks = {n: sorted((f[3], f[2]) for f in con.execute(f'PRAGMA foreign_key_list("{n}")')) for n in names}
        con.close()
        verdicts = {v["table_name"]: v for v in r["table_verdicts"]}
        assert list(verdicts) == names
        cap = Limits().max_db_table_rows  # a database keeps tables over the flat-file 1,000-row cap
        for n, c in counts.items():
            want = "too_many_rows" if c > cap else ("empty_table" if c == 0 else None)
            assert (verdicts[n]["n_rows"], verdicts[n]["reason_code"]) == (c, want), (name, n)
        profiled = {t["table_name"]: t for t in tables if t["file_id"] == r["file_id"]}
        assert set(profiled) == {n for n, c in counts.items() if 0 < c <= cap}
        for n, t in profiled.items():
            assert t["n_rows"] == counts[n] and t["ddl"].upper().startswith("CREATE TABLE")
            assert sorted((k["from_column"], k["to_table"]) for k in t["foreign_keys"]) == fks[n]
    # Schema dumps (.sql), question files (.json) and licences travel with the databases: rejected, not lost.
    others = {n: r["reason_code"] for n, r in rows.items() if not n.endswith(".sqlite")}
    assert others == {n: "not_tabular" if "LICENSE" in n else "unsupported_format" for n in others}
    assert any(n.endswith(".sql") for n in others) and any(n.endswith(".json") for n in others)


def test_workbooks(corpus):
    _, files, tables = corpus
    rows = by_source(files, "xlsx")
    verdicts = {
        n: {v["table_name"]: (v["status"], v["reason_code"], v["n_rows"]) for v in r["table_verdicts"]}
        for n, r in rows.items()
    }
    fin = verdicts["Financial Sample.xlsx"]
    assert fin["Sheet1"] == ("accepted", None, 700)
    assert all(v[0] == "rejected" for k, v in fin.items() if k != "Sheet1") and len(fin) == 9
    store = verdicts["Sample - Superstore.xlsx"]
    assert store == {
        "Orders": ("rejected", "too_many_rows", 9994),
        "Returns": ("accepted", None, 296),
        "People": ("rejected", "too_few_rows", 4),
    }
    nst = next(t for t in tables if t["file_id"] == rows["nst-est2019-01.xlsx"]["file_id"])
    assert nst["n_rows"] == 57 and nst["n_cols"] == 13  # 51 states + 5 regions/US + Puerto Rico; no footnotes
    assert nst["columns"][0] == "Geographic Area" and "Census" in nst["columns"][1]
    assert nst["columns"][-1].endswith("2019")
    head = json.loads(nst["meta_info"])["head"].splitlines()
    assert head[2].startswith("| United States | 308745538 |")


def test_messy_csvs(corpus):
    root, files, tables = corpus
    rows = by_source(files, "messy")
    countries = rows["countries_of_the_world_semicolon_decimalcomma.csv"]
    assert countries["status"] == "accepted" and countries["n_rows"] == 227 and countries["n_cols"] == 20
    t = next(t for t in tables if t["file_id"] == countries["file_id"])
    opts = json.loads(t["read_options"])
    assert (opts["sep"], opts["decimal"]) == (";", ",")
    from datamind.formats import load_table

    df = load_table(t["staged_uri"], opts)
    lines = (DATA / "messy_csv" / "countries_of_the_world_semicolon_decimalcomma.csv").read_text().splitlines()
    afg = lines[1].split(";")
    assert df.loc[0, "Country"] == afg[0].strip()
    assert df.loc[0, "Net migration"] == float(afg[6].replace(",", "."))
    bahamas = df[df["Country"] == "Bahamas; The"]
    assert len(bahamas) == 1 and bahamas["Population"].iloc[0] == 303770
    spam = rows["spam_sms_latin1.csv"]
    assert (spam["status"], spam["reason_code"]) == ("rejected", "too_many_rows")
    assert spam["encoding"] in ("cp1252", "latin-1", "iso8859-15")
    assert spam["table_verdicts"][0]["n_rows"] == len(
        pd.read_csv(DATA / "messy_csv" / "spam_sms_latin1.csv", encoding="latin-1")
    )
    mis = rows["mislabeled/Sample - Superstore.csv"]
    assert (mis["format"], mis["declared_format"], mis["status"]) == ("xlsx", "csv", "accepted")
    assert mis["staged_uri"].endswith("Sample - Superstore.xlsx")
