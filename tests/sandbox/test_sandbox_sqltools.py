"""The SQL tools in-process: reads work, every kind of write is refused, slow statements are cut off."""

from __future__ import annotations

import csv
import hashlib
import os
import sqlite3

import pytest

from datamind.sandbox.sqltools import ReadOnlyDatabase, SqlToolError

WRITES = [
    "DELETE FROM orders",
    "UPDATE customers SET name = 'x'",
    "INSERT INTO customers VALUES (9, 'Eve', 'Rome')",
    "DROP TABLE orders",
    "CREATE TABLE t (a)",
    "CREATE TEMP TABLE t AS SELECT 1",
    "ALTER TABLE customers ADD COLUMN age INTEGER",
    "ATTACH DATABASE 'other.db' AS other",
    "PRAGMA writable_schema = 1",
    "PRAGMA journal_mode = WAL",
    "VACUUM",
    "CREATE INDEX idx_total ON orders(total)",
    "PRAGMA query_only = OFF",
    "SELECT 1; DROP TABLE orders",
]


def _sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture()
def db(sqlite_file, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return ReadOnlyDatabase(str(sqlite_file), timeout_s=0.5)


@pytest.mark.parametrize("sql", WRITES)
def test_no_statement_can_modify_the_database(db, sqlite_file, sql):
    before = _sha(sqlite_file)
    with pytest.raises(SqlToolError):
        db.execute_sql(sql, "out.csv")
    assert _sha(sqlite_file) == before
    con = sqlite3.connect(sqlite_file)
    assert con.execute("SELECT COUNT(*) FROM orders").fetchone() == (4,)
    con.close()


def test_execute_sql_writes_the_result_as_csv(db):
    summary = db.execute_sql(
        "SELECT c.city, SUM(o.total) AS revenue FROM orders o JOIN customers c "
        "ON c.id = o.customer_id GROUP BY c.city ORDER BY c.city",
        "revenue.csv",
    )
    with open("revenue.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    # London: Ada 10.5 + 4.5 and Bo 1.0 = 16.0; Paris: Lin 30.0
    assert rows == [["city", "revenue"], ["London", "16.0"], ["Paris", "30.0"]]
    assert summary.startswith("2 rows x 2 columns")


def test_output_path_must_stay_inside_the_working_directory(db):
    for bad in ("/tmp/escape.csv", "../escape.csv"):
        with pytest.raises(SqlToolError, match="inside the working directory"):
            db.execute_sql("SELECT 1", bad)


def test_get_db_info_describes_tables_columns_keys_and_counts(db):
    info = db.get_db_info()
    assert "Table customers (3 rows)" in info
    assert "Table orders (4 rows)" in info
    assert "  - name TEXT NOT NULL" in info
    assert "  - id INTEGER PRIMARY KEY" in info
    assert "foreign key customer_id -> customers.id" in info


def test_a_runaway_query_is_stopped_by_the_time_limit(db):
    runaway = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT COUNT(*) FROM n"
    with pytest.raises(SqlToolError, match="time limit"):
        db.execute_sql(runaway, "never.csv")
    assert not os.path.exists("never.csv")
    assert db.execute_sql("SELECT 1 AS one", "after.csv").startswith("1 rows")


def test_execute_sql_binds_values_from_earlier_steps(db):
    """A value an earlier cell computed goes into the query as a bound parameter: a name with a quote in it and a
    count pandas read back as a numpy integer both bind, by position or by name."""
    import numpy as np

    db.execute_sql(
        "SELECT name FROM customers WHERE city = :city ORDER BY name", "names.csv", params={"city": "London"}
    )
    with open("names.csv", newline="") as fh:
        assert list(csv.reader(fh)) == [["name"], ["Ada"], ["Bo"]]
    db.execute_sql("SELECT COUNT(*) AS n FROM orders WHERE total > ?", "n.csv", params=(np.int64(5),))
    with open("n.csv", newline="") as fh:
        assert list(csv.reader(fh)) == [["n"], ["2"]]  # 10.5 and 30.0 (4.5 and 1.0 are not above 5)
    db.execute_sql("SELECT COUNT(*) AS n FROM customers WHERE name = ?", "q.csv", params=["O'Hara"])
    with open("q.csv", newline="") as fh:
        assert list(csv.reader(fh)) == [["n"], ["0"]]
    with pytest.raises(SqlToolError, match="parameters"):
        db.execute_sql("SELECT * FROM orders WHERE total > :limit", "x.csv", params={})
    with pytest.raises(SqlToolError, match="tuple, list or dict"):
        db.execute_sql("SELECT * FROM orders WHERE total > ?", "x.csv", params=4)
