"""Benchmark files, each read from the benchmark's own published layout in a folder the user names.

Read by evaluation (the suites an agent is scored on) and by decontamination (what ingest and
synthesis keep out of the training data).

Nothing is downloaded: a suite is a loader over files already on disk. Every loader returns
:class:`EvalItem` records in a stable order with stable ids, so ``limit`` and reruns pick the same
questions, plus the count of items it skipped and why (a missing database, an excluded question type).

- ``dabench``: InfiAgent-DABench: ``*questions*.jsonl`` + ``*labels*.jsonl`` + the tables folder
  (``da-dev-tables/`` or the folder itself); answers are ``@name[value]`` lists.
- ``tablebench``: TableBench JSONL with the table inline (``{"columns": [...], "data": [[...]]}``);
  the table is written to CSV for the agent. Chart (Visualization) and forecasting questions are
  excluded, as in the DATAMIND evaluation.
- ``bird``: BIRD / Spider-style text-to-SQL: a JSON list of ``{db_id, question, SQL|query[, evidence]}``
  and databases under ``database/``, ``dev_databases/`` or ``databases/`` as ``<db_id>/<db_id>.sqlite``.
(The project's own held-out split is a suite too: ``datamind.evaluate.suites``.)
"""

from __future__ import annotations

import csv
import glob
import json
import os
from collections import Counter
from dataclasses import dataclass, field

from datamind.vocabulary import BENCHMARK_KINDS


class SuiteError(ValueError):
    """A suite folder or file that cannot be read as its benchmark's layout (a permanent error)."""


@dataclass(frozen=True)
class EvalItem:
    suite: str
    item_id: str
    question: str  # what the agent is asked (the benchmark's question, constraints and answer format)
    data_path: str
    data_format: str  # csv | xlsx | sqlite
    category: str
    gold: str  # the benchmark's answer as published (DABench @name[value] list, gold SQL, a value)
    hop: int | None = None
    extra: dict = field(default_factory=dict, compare=False)


@dataclass
class Loaded:
    items: list[EvalItem]
    skipped: Counter = field(default_factory=Counter)


def _jsonl(path: str) -> list[dict]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise SuiteError(f"{path}:{n}: not JSON ({exc.msg})") from None
    return out


def _one(pattern: str, what: str) -> str:
    found = sorted(glob.glob(pattern))
    if not found:
        raise SuiteError(f"no {what} ({pattern})")
    return found[0]


# -- DABench -----------------------------------------------------------------------------------


def load_dabench(folder: str) -> Loaded:
    questions = _jsonl(_one(os.path.join(folder, "*questions*.jsonl"), "DABench questions file"))
    labels = {r["id"]: r["common_answers"] for r in _jsonl(_one(os.path.join(folder, "*labels*.jsonl"), "labels"))}
    tables = os.path.join(folder, "da-dev-tables")
    tables = tables if os.path.isdir(tables) else folder
    out = Loaded([])
    for q in sorted(questions, key=lambda r: r["id"]):
        answers = labels.get(q["id"])
        path = os.path.join(tables, q.get("file_name", ""))
        if not answers:
            out.skipped["no_label"] += 1
            continue
        if not os.path.isfile(path):
            out.skipped["missing_table"] += 1
            continue
        text = q["question"].strip()
        if q.get("constraints"):
            text += f"\nConstraints: {q['constraints'].strip()}"
        if q.get("format"):
            text += f"\nAnswer format: {q['format'].strip()}"
        out.items.append(
            EvalItem(
                suite="dabench",
                item_id=f"dabench-{q['id']}",
                question=text,
                data_path=path,
                data_format="csv",
                category=", ".join(q.get("concepts") or []) or "unlabelled",
                gold=", ".join(f"@{name}[{value}]" for name, value in answers),
                extra={"labels": [list(a) for a in answers], "level": q.get("level")},
            )
        )
    return out


# -- TableBench --------------------------------------------------------------------------------

_EXCLUDED_TYPES = ("visualization",)
_EXCLUDED_SUBTYPES = ("forecast",)


def load_tablebench(path: str, table_dir: str) -> Loaded:
    """``path``: a TableBench JSONL file (or a folder holding one); tables are written under ``table_dir``."""
    if os.path.isdir(path):
        path = _one(os.path.join(path, "*.jsonl"), "TableBench JSONL file")
    os.makedirs(table_dir, exist_ok=True)
    out = Loaded([])
    for n, r in enumerate(_jsonl(path)):
        qtype, subtype = str(r.get("qtype", "")), str(r.get("qsubtype", ""))
        if qtype.lower() in _EXCLUDED_TYPES or any(x in subtype.lower() for x in _EXCLUDED_SUBTYPES):
            out.skipped[f"excluded_{qtype or 'type'}/{subtype or 'subtype'}"] += 1
            continue
        table = r.get("table")
        try:
            table = json.loads(table) if isinstance(table, str) else table
            columns, data = list(table["columns"]), list(table["data"])
        except (TypeError, KeyError, json.JSONDecodeError):
            out.skipped["bad_table"] += 1
            continue
        item_id = f"tablebench-{r.get('id', n)}"
        csv_path = os.path.join(table_dir, f"{item_id}.csv")
        tmp = csv_path + ".tmp"
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(columns)
            writer.writerows(data)
        os.replace(tmp, csv_path)
        out.items.append(
            EvalItem(
                suite="tablebench",
                item_id=item_id,
                question=str(r["question"]).strip(),
                data_path=csv_path,
                data_format="csv",
                category=f"{qtype}/{subtype}",
                gold=str(r.get("answer", "")),
            )
        )
    return out


# -- BIRD / Spider text-to-SQL -----------------------------------------------------------------

_DB_DIRS = ("database", "dev_databases", "databases", "train_databases")
SQL_RESULT_NOTE = (
    "Answer with SQL: the result of the last query you run with execute_sql is taken as your answer, "
    "so make that query return exactly the rows and columns asked for."
)


def _bird_questions(folder: str) -> list[dict]:
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path, encoding="utf-8") as fh:
            try:
                data = json.load(fh)
            except json.JSONDecodeError:
                continue
        if isinstance(data, list) and data and isinstance(data[0], dict) and "db_id" in data[0]:
            if "question" in data[0] and ("SQL" in data[0] or "query" in data[0]):
                return data
    raise SuiteError(f"no BIRD/Spider question file (a JSON list of db_id/question/SQL) in {folder}")


def _database(folder: str, db_id: str) -> str | None:
    for sub in _DB_DIRS:
        for ext in (".sqlite", ".db"):
            path = os.path.join(folder, sub, db_id, db_id + ext)
            if os.path.isfile(path):
                return path
    return None


def load_bird(folder: str) -> Loaded:
    out = Loaded([])
    for n, q in enumerate(_bird_questions(folder)):
        db = _database(folder, q["db_id"])
        if db is None:
            out.skipped["missing_database"] += 1
            continue
        text = q["question"].strip()
        if q.get("evidence"):
            text += f"\nExternal knowledge: {q['evidence'].strip()}"
        out.items.append(
            EvalItem(
                suite="bird",
                item_id=f"bird-{q.get('question_id', n)}",
                question=f"{text}\n{SQL_RESULT_NOTE}",
                data_path=db,
                data_format="sqlite",
                category=q["db_id"],
                gold=q.get("SQL") or q["query"],
            )
        )
    return out


def load_benchmark(kind: str, location: str, table_dir: str | None = None) -> Loaded:
    if kind == "dabench":
        return load_dabench(location)
    if kind == "tablebench":
        return load_tablebench(location, table_dir or os.path.join(os.path.dirname(location), "_tables"))
    if kind == "bird":
        return load_bird(location)
    raise SuiteError(f"unknown benchmark kind {kind!r}; known: {', '.join(BENCHMARK_KINDS)}")
