"""A small, real corpus for the trajectory stages: a CSV file, a SQLite database, catalog rows and queries.

The queries carry reference programs and solution variants written here by hand (pandas, numpy, the csv
module, SQL), and the expected answers are computed in this module with plain Python over the same rows,
independently of any code under test.
"""

from __future__ import annotations

import csv
import os
import sqlite3
from datetime import UTC, datetime

from datamind.assets import DIRS
from datamind.schemas import CATALOG_FILES, CATALOG_TABLES, QUERIES
from datamind.shards import write_shard
from datamind.storage import DataRoot

NOW = datetime(2026, 1, 1, tzinfo=UTC)
REGIONS = ("North", "South", "East")
PRODUCTS = ("A", "B", "C", "D", "E")


def sales_rows() -> list[dict]:
    return [
        {
            "region": REGIONS[i % 3],
            "product": PRODUCTS[i % 5],
            "units": (i * 7) % 13 + 1,
            "price": round(10 + (i * 3.7) % 20, 2),
        }
        for i in range(30)
    ]


def order_rows() -> list[tuple[int, str, float]]:
    return [(i + 1, f"cust{i % 6}", round(20 + (i * 37) % 190, 1)) for i in range(25)]


def budget_rows() -> list[dict]:
    return [{"dept": ("Ops", "R&D", "Sales")[i % 3], "cost": 100 + (i * 53) % 400} for i in range(24)]


def expected() -> dict[str, str]:
    """Answers computed by hand-written Python over the rows (not by the code under test)."""
    rows = sales_rows()
    north = sum(r["units"] for r in rows if r["region"] == "North")
    total = sum(r["units"] for r in rows)
    south = [r["price"] for r in rows if r["region"] == "South"]
    return {
        "q1": str(north),
        "q2": f"{100 * north / total:.2f}",
        "q3": f"{sum(south) / len(south):.2f}",
        "q4": str(sum(1 for _, _, amount in order_rows() if amount > 100)),
        "q3_buggy": f"{max(south):.2f}",
        "q6": str(sum(r["cost"] for r in budget_rows() if r["dept"] == "R&D")),
    }


# -- programs --------------------------------------------------------------------------------------
Q1_PANDAS = """import pandas as pd
df = pd.read_csv('sales.csv')
print(int(df.loc[df['region'] == 'North', 'units'].sum()))"""
Q1_NUMPY = """import numpy as np
import pandas as pd
df = pd.read_csv('sales.csv')
units = df['units'].to_numpy()
mask = (df['region'] == 'North').to_numpy()
print(int(np.where(mask, units, 0).sum()))"""
Q1_STDLIB = """import csv
with open('sales.csv', newline='') as fh:
    print(sum(int(r['units']) for r in csv.DictReader(fh) if r['region'] == 'North'))"""

Q2_PANDAS = """import pandas as pd
df = pd.read_csv('sales.csv')
north = df.loc[df['region'] == 'North', 'units'].sum()
print(f"{100 * north / df['units'].sum():.2f}")"""
Q2_NUMPY = """import numpy as np
import pandas as pd
df = pd.read_csv('sales.csv')
u = df['units'].to_numpy(dtype=float)
share = u[(df['region'] == 'North').to_numpy()].sum() / u.sum()
print(f"{share * 100:.2f}")"""
Q2_STDLIB = """import csv
with open('sales.csv', newline='') as fh:
    rows = list(csv.DictReader(fh))
north = sum(int(r['units']) for r in rows if r['region'] == 'North')
print(f"{100 * north / sum(int(r['units']) for r in rows):.2f}")"""

Q3_PANDAS = """import pandas as pd
df = pd.read_csv('sales.csv')
print(f"{df.loc[df['region'] == 'South', 'price'].mean():.2f}")"""
# A deliberately wrong variant (takes the maximum, not the mean): the judge must catch the disagreement.
Q3_BUGGY = """import pandas as pd
df = pd.read_csv('sales.csv')
print(f"{df.loc[df['region'] == 'South', 'price'].max():.2f}")"""
Q3_NUMPY = """import numpy as np
import pandas as pd
df = pd.read_csv('sales.csv')
p = df['price'].to_numpy()
print(f"{np.mean(p[(df['region'] == 'South').to_numpy()]):.2f}")"""

Q4_SQL = "SELECT COUNT(*) FROM orders WHERE amount > 100"
Q4_SQL_CASE = "SELECT SUM(CASE WHEN amount > 100 THEN 1 ELSE 0 END) FROM orders"
Q4_TOOL_PANDAS = """import pandas as pd
summary = execute_sql(sql="SELECT amount FROM orders", output_path="amounts.csv")
print(int((pd.read_csv("amounts.csv")["amount"] > 100).sum()))"""

# Synthesized programs may name the staged file by its absolute path: {xlsx_path} is filled in at build time.
Q6_ABSOLUTE = """import pandas as pd
DATA_PATH = '{xlsx_path}'
df = pd.read_excel(DATA_PATH, sheet_name='data')
print(int(df.loc[df['dept'] == 'R&D', 'cost'].sum()))"""
Q6_NUMPY = """import numpy as np
import pandas as pd
df = pd.read_excel('budget.xlsx', sheet_name='data')
print(int(np.sum(df['cost'].to_numpy()[(df['dept'] == 'R&D').to_numpy()])))"""
Q6_GROUPBY = """import pandas as pd
df = pd.read_excel('budget.xlsx', sheet_name='data')
print(int(df.groupby('dept')['cost'].sum()['R&D']))"""

Q5_PANDAS = """import pandas as pd
df = pd.read_csv('sales.csv')
print(df.groupby('product')['units'].sum().idxmax())"""


def _query(qid: str, **kw) -> dict:
    row = {
        "query_id": qid,
        "file_id": "f_sales",
        "table_id": "t_sales",
        "tables": ["sales"],
        "data_format": "csv",
        "hop": 1,
        "parent_query_ids": [],
        "root_query_id": qid,
        "description": None,
        "solution_lang": "python",
        "solution_variants": [],
        "reference_answer": None,
        "backend": "offline",
        "model": None,
        "template_version": "synth-test@1",
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "created_at": NOW,
        "run_id": "fixture",
    }
    row.update(kw)
    return row


def queries(xlsx_path: str = "budget.xlsx") -> list[dict]:
    exp = expected()
    return [
        _query(
            "q1",
            category="aggregation",
            question="What is the total number of units sold in the North region?",
            reference_solution=Q1_PANDAS,
            solution_variants=[Q1_NUMPY, Q1_STDLIB],
            reference_answer=exp["q1"],
        ),
        _query(
            "q2",
            category="multi_hop_numerical_reasoning",
            hop=2,
            parent_query_ids=["q1"],
            root_query_id="q1",
            question="What percentage of all units sold comes from the North region (two decimals)?",
            reference_solution=Q2_PANDAS,
            solution_variants=[Q2_NUMPY, Q2_STDLIB],
            reference_answer=exp["q2"],
        ),
        _query(
            "q3",
            category="comparison",
            question="What is the average price in the South region (two decimals)?",
            reference_solution=Q3_PANDAS,
            solution_variants=[Q3_BUGGY, Q3_NUMPY],
            reference_answer=exp["q3"],
        ),
        _query(
            "q4",
            category="counting",
            file_id="f_shop",
            table_id="t_orders",
            tables=["orders"],
            data_format="sqlite",
            question="How many orders have an amount above 100?",
            solution_lang="sql",
            reference_solution=Q4_SQL,
            solution_variants=[Q4_SQL_CASE, Q4_TOOL_PANDAS],
            reference_answer=exp["q4"],
        ),
        _query(
            "q5",
            category="ranking",
            question="Which product sold the most units?",
            reference_solution=Q5_PANDAS,
            solution_variants=[],
            reference_answer=None,
        ),
        _query(
            "q6",
            category="aggregation",
            file_id="f_budget",
            table_id="t_budget",
            tables=["data"],
            data_format="xlsx",
            question="What is the total cost of the R&D department?",
            reference_solution=Q6_ABSOLUTE.replace("{xlsx_path}", xlsx_path),
            solution_variants=[Q6_NUMPY, Q6_GROUPBY],
            reference_answer=exp["q6"],
        ),
    ]


def build_corpus(root: DataRoot, tmp_dir: str, query_rows: list[dict] | None = None) -> dict[str, str]:
    """Write the data files and the catalog/queries tables under ``root``; returns the data file paths."""
    staged = os.path.join(tmp_dir, "staged")
    os.makedirs(staged, exist_ok=True)
    csv_path = os.path.join(staged, "sales.csv")
    with open(csv_path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["region", "product", "units", "price"])
        w.writeheader()
        w.writerows(sales_rows())
    db_path = os.path.join(staged, "shop.sqlite")
    if os.path.exists(db_path):
        os.remove(db_path)
    con = sqlite3.connect(db_path)
    con.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, amount REAL)")
    con.executemany("INSERT INTO orders VALUES (?, ?, ?)", order_rows())
    con.commit()
    con.close()
    xlsx_path = os.path.join(staged, "budget.xlsx")
    import pandas as pd

    with pd.ExcelWriter(xlsx_path) as xw:
        pd.DataFrame({"note": ["cover sheet"]}).to_excel(xw, sheet_name="cover", index=False)
        pd.DataFrame(budget_rows()).to_excel(xw, sheet_name="data", index=False)
    files = [
        {
            "file_id": "f_sales",
            "source": "fixture",
            "source_uri": "fixture://sales.csv",
            "rel_path": "sales.csv",
            "format": "csv",
            "status": "accepted",
            "content_sha256": "0" * 64,
            "size_bytes": os.path.getsize(csv_path),
            "staged_uri": csv_path,
            "ingested_at": NOW,
        },
        {
            "file_id": "f_shop",
            "source": "fixture",
            "source_uri": "fixture://shop.sqlite",
            "rel_path": "shop.sqlite",
            "format": "sqlite",
            "status": "accepted",
            "content_sha256": "1" * 64,
            "size_bytes": os.path.getsize(db_path),
            "staged_uri": db_path,
            "ingested_at": NOW,
        },
        {
            "file_id": "f_budget",
            "source": "fixture",
            "source_uri": "fixture://budget.xlsx",
            "rel_path": "budget.xlsx",
            "format": "xlsx",
            "status": "accepted",
            "content_sha256": "2" * 64,
            "size_bytes": os.path.getsize(xlsx_path),
            "staged_uri": xlsx_path,
            "ingested_at": NOW,
        },
    ]
    tables = [
        {
            "table_id": "t_sales",
            "file_id": "f_sales",
            "source": "fixture",
            "format": "csv",
            "table_name": "sales",
            "n_rows": 30,
            "n_cols": 4,
            "staged_uri": csv_path,
            "read_options": "{}",
            "profiled_at": NOW,
        },
        {
            "table_id": "t_orders",
            "file_id": "f_shop",
            "source": "fixture",
            "format": "sqlite",
            "table_name": "orders",
            "n_rows": 25,
            "n_cols": 3,
            "staged_uri": db_path,
            "read_options": '{"table": "orders"}',
            "profiled_at": NOW,
        },
        {
            "table_id": "t_budget",
            "file_id": "f_budget",
            "source": "fixture",
            "format": "xlsx",
            "table_name": "data",
            "n_rows": 24,
            "n_cols": 2,
            "staged_uri": xlsx_path,
            "read_options": '{"sheet_name": "data"}',
            "profiled_at": NOW,
        },
    ]
    write_shard(root, CATALOG_FILES, DIRS["catalog_files"], files, "part-fixture.parquet")
    write_shard(root, CATALOG_TABLES, DIRS["catalog_tables"], tables, "part-fixture.parquet")
    write_shard(
        root,
        QUERIES,
        DIRS["queries"],
        query_rows if query_rows is not None else queries(xlsx_path),
        "part-fixture.parquet",
    )
    return {"csv": csv_path, "sqlite": db_path, "xlsx": xlsx_path}
