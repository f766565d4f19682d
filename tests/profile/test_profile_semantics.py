"""What rows and cells mean, found at profiling (issue 46): aggregate rows with their evidence, and missing values
written as text, recorded per column in ``meta_info``. The files are written here and read by the real loaders."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "synth"))

from synth_fixtures import catalog_rows, census_csv  # noqa: E402


def meta(path: Path, table: str | None = None) -> dict:
    rows = catalog_rows(path)
    row = rows[0] if table is None else next(r for r in rows if r["table_name"] == table)
    return json.loads(row["meta_info"])


def test_a_country_its_regions_and_its_states_are_found_with_their_evidence(tmp_path):
    found = meta(census_csv(tmp_path / "census.csv"))["aggregate_rows"]
    assert found["rows"] == [0, 1, 2, 3, 4] and found["count"] == 5
    assert found["label_column"] == "Geographic Area"
    assert found["labels"] == ["United States", "Northeast", "Midwest", "South", "West"]
    assert found["evidence"][0].startswith("row 1 equals the sum of rows 2, 3, 4, 5 in pop2019, pop2020")


def test_a_total_line_is_found_by_its_label_and_by_its_sums_alone(tmp_path):
    labelled = tmp_path / "labelled.csv"
    labelled.write_text("store,sales,units\nA,10,1\nB,20,2\nC,30,3\nTotal,60,6\n")
    found = meta(labelled)["aggregate_rows"]
    assert (found["rows"], found["label_column"], found["labels"]) == ([3], "store", ["Total"])
    assert found["evidence"] == ["row 4: store is 'Total'"]
    # no label at all: the last row sums the others in both amount columns
    bare = tmp_path / "bare.csv"
    bare.write_text("sales,units\n10,1\n20,2\n30,3\n45,4\n105,10\n")
    found = meta(bare)["aggregate_rows"]
    assert found["rows"] == [4] and found["label_column"] is None
    assert found["evidence"] == ["row 5 equals the sum of the other 4 rows in sales, units"]


def test_subtotals_under_each_group_are_found_and_a_kind_called_total_is_not(tmp_path):
    blocks = tmp_path / "blocks.csv"
    blocks.write_text(
        "item,kind,amount\nbolts,Total,4\nnuts,Partial,6\nTotal,x,10\nscrews,Partial,1\nrivets,Total,2\nTotal,x,3\n"
    )
    found = meta(blocks)["aggregate_rows"]
    # "Total" in `item` sums the rows above it each time; in `kind` it is a kind of thing (a total eclipse)
    assert found["rows"] == [2, 5] and found["label_column"] == "item" and found["labels"] == ["Total"]
    eclipses = tmp_path / "eclipses.csv"
    eclipses.write_text(
        "year,kind,duration\n" + "".join(f"{2000 + i},{'Total' if i % 3 == 0 else 'Partial'},{i}\n" for i in range(12))
    )
    assert "aggregate_rows" not in meta(eclipses)


def test_a_film_called_total_recall_is_data(tmp_path):
    films = tmp_path / "films.csv"
    films.write_text("title,gross\nTotal Recall,119\nAlien,104\nHeat,187\nUp,735\n")
    assert "aggregate_rows" not in meta(films)


def test_missing_values_written_as_text_are_counted_per_column(tmp_path):
    db = tmp_path / "disney.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE characters (name TEXT, voice_actor TEXT, movie TEXT, region TEXT)")
    rows = [(f"c{i}", "None" if i % 3 == 0 else f"actor {i}", "-" if i == 4 else f"m{i % 5}", "NA" if i % 2 else "EU")
            for i in range(30)]  # fmt: skip
    con.executemany("INSERT INTO characters VALUES (?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    missing = meta(db, "characters")["disguised_missing"]
    # 'NA' beside 'EU' is a region code, not a blank
    assert missing == {"voice_actor": {"None": 10}, "movie": {"-": 1}}
    csv = tmp_path / "survey.csv"
    csv.write_text("id,answer,score\n" + "".join(f"{i},{'?' if i % 4 == 0 else 'yes'},{i}\n" for i in range(12)))
    assert meta(csv)["disguised_missing"] == {"answer": {"?": 3}}
