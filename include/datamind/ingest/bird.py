"""Discover BIRD / OmniSQL-layout databases: ``<db_id>/<db_id>.sqlite`` under a directory or archive.

Each database may carry ``<db_id>/database_description/<table>.csv`` (columns ``original_column_name,
column_name, column_description, data_format, value_description``; frequently cp1252 or with a BOM) and
the root may hold question files (``*.json`` lists of ``{"db_id", "question", ...}``). Descriptions and
question counts travel in the SourceFile's provenance; profiling turns them into column descriptions.
Only the ``.sqlite`` files become catalog entries: description and question files are metadata of them.
"""

from __future__ import annotations

import csv
import io
import json
import posixpath
import random
from collections import defaultdict
from typing import Any

from datamind.formats import decode_text, sniff
from datamind.ingest.sources import SourceFile, SourceReadError, list_source_files
from datamind.settings import Limits

_MAX_META_BYTES = 16 * 1024 * 1024
_EXAMPLES = 3


def parse_description_csv(data: bytes) -> dict[str, str]:
    """{original column name: description} from one BIRD description file, whatever its encoding."""
    text = decode_text(data, sniff.detect_encoding(data))
    out: dict[str, str] = {}
    for rec in csv.DictReader(io.StringIO(text)):
        rec = {(k or "").strip().lower(): (v or "").strip() for k, v in rec.items() if k is not None}
        col = rec.get("original_column_name") or rec.get("column_name")
        if not col:
            continue
        parts = []
        full = rec.get("column_name", "")
        if full and full.lower() != col.lower():
            parts.append(full)
        if rec.get("column_description"):
            parts.append(rec["column_description"])
        if rec.get("value_description"):
            parts.append(f"Values: {rec['value_description']}")
        out[col] = " | ".join(" ".join(p.split()) for p in parts)
    return out


def _db_id_of(rel_path: str) -> str | None:
    parent, name = posixpath.split(rel_path)
    stem, _, ext = name.rpartition(".")
    if ext.lower() in ("sqlite", "sqlite3", "db") and posixpath.basename(parent) == stem:
        return stem
    return None


def _questions(files: list[SourceFile]) -> dict[str, list[str]]:
    by_db: dict[str, list[str]] = defaultdict(list)
    for f in files:
        if not f.rel_path.lower().endswith(".json") or "database_description" in f.rel_path or f.size > _MAX_META_BYTES:
            continue
        try:
            items = json.loads(f.read_bytes().decode("utf-8-sig"))
        except (ValueError, UnicodeDecodeError, SourceReadError, OSError):
            continue
        if not isinstance(items, list):
            continue
        for item in items:
            if isinstance(item, dict) and isinstance(item.get("db_id"), str) and item.get("question"):
                by_db[item["db_id"]].append(str(item["question"]))
    return by_db


def discover_bird(
    root_uri: str, sample_size: int | None = None, seed: int = 0, limits: Limits | None = None
) -> list[SourceFile]:
    """The database files under ``root_uri``, sampled deterministically, with descriptions attached."""
    limits = limits or Limits.from_env()
    files = list_source_files(root_uri, limits)
    dbs = {db: f for f in files if (db := _db_id_of(f.rel_path))}
    if not dbs:
        raise FileNotFoundError(f"no <db_id>/<db_id>.sqlite databases under {root_uri!r}")
    chosen = sorted(dbs)
    if sample_size is not None and sample_size < len(chosen):
        chosen = sorted(random.Random(seed).sample(chosen, sample_size))
    descs: dict[str, dict[str, dict[str, str]]] = defaultdict(dict)
    errors: dict[str, list[str]] = defaultdict(list)
    for f in files:
        parts = f.rel_path.split("/")
        if len(parts) >= 3 and parts[-2] == "database_description" and parts[-1].lower().endswith(".csv"):
            db = parts[-3]
            if db not in chosen or f.size > _MAX_META_BYTES:
                continue
            try:
                descs[db][parts[-1][: -len(".csv")]] = parse_description_csv(f.read_bytes())
            except (SourceReadError, OSError, csv.Error, UnicodeDecodeError) as exc:
                errors[db].append(f"{parts[-1]}: {exc}"[:200])
    questions = _questions(files)
    out = []
    for db in chosen:
        f = dbs[db]
        prov: dict[str, Any] = {
            "dataset": "bird",
            "db_id": db,
            "column_descriptions": descs.get(db, {}),
            "n_questions": len(questions.get(db, [])),
            "example_questions": questions.get(db, [])[:_EXAMPLES],
        }
        if errors.get(db):
            prov["description_errors"] = errors[db]
        out.append(SourceFile(f.rel_path, f.source_uri, f.size, f.read_cap, f.precheck, prov))
    return out
