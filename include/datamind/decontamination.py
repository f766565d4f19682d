"""Keep benchmark tables and questions out of the training data.

Configured by the same folders evaluation reads (``DATAMIND_BENCHMARKS``: ``{"dabench": "/data/dabench",
"bird": "/data/bird", "tablebench": "/data/tb.jsonl"}``), through the same suite loaders.

Tables: a file is a benchmark's when its bytes hash the same, or when one of its tables has the same
schema (normalized column names, as a set) and at least ``ROW_OVERLAP`` of its rows appear in the
benchmark table, rows compared as normalized values in sorted-column order. That survives
reordered rows and columns, another text encoding, and a CSV saved as XLSX (numbers compared as
numbers, midnight timestamps as dates, text trimmed and case-folded).

Questions: a synthesized question that shares a run of ``ngram`` words (13 by default, the usual
contamination rule) with a benchmark question is dropped.

The index is built once per benchmark configuration and kept under ``<data root>/benchmarks/`` (keyed
by the configuration and the files' sizes and modification times), so each ingest task only loads it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import unicodedata
from dataclasses import dataclass, field, replace

import pandas as pd

log = logging.getLogger(__name__)

ROW_OVERLAP = 0.9
NGRAM = 13
INDEX_DIR = "benchmarks"
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def _norm_name(name) -> str:
    return " ".join(unicodedata.normalize("NFKC", str(name)).casefold().split())


def _norm_value(v) -> str:
    try:
        if pd.isna(v):  # None, NaN, NaT and pd.NA alike: CSV and XLSX readers differ in which they give
            return ""
    except (TypeError, ValueError):  # a list or array cell has no single truth value
        pass
    if isinstance(v, pd.Timestamp):
        return v.date().isoformat() if v == v.normalize() else v.isoformat()
    if isinstance(v, (bool,)):
        return str(v).lower()
    if isinstance(v, (int, float)):
        return f"{float(v):.6g}"
    text = unicodedata.normalize("NFKC", str(v)).strip().casefold()
    try:  # numbers written as text in one format and as numbers in another
        return f"{float(text):.6g}"
    except ValueError:
        return text


def table_signature(df: pd.DataFrame) -> tuple[str, set[str]]:
    """(schema hash, row hashes) of a table, independent of row and column order."""
    cols = sorted(range(df.shape[1]), key=lambda j: _norm_name(df.columns[j]))
    schema = hashlib.sha256("\x1f".join(_norm_name(df.columns[j]) for j in cols).encode()).hexdigest()[:16]
    rows = set()
    for values in df.itertuples(index=False, name=None):
        key = "\x1f".join(_norm_value(values[j]) for j in cols)
        rows.add(hashlib.sha256(key.encode()).hexdigest()[:16])
    return schema, rows


def ngrams(text: str, n: int = NGRAM) -> set[str]:
    words = _WORD.findall(unicodedata.normalize("NFKC", text or "").casefold())
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


@dataclass
class BenchmarkIndex:
    ngram: int = NGRAM
    file_sha: dict[str, str] = field(default_factory=dict)  # content sha256 -> benchmark item
    tables: list[dict] = field(default_factory=list)  # {item, schema, rows: set}
    question_ngrams: dict[str, str] = field(default_factory=dict)  # n-gram -> benchmark item

    @property
    def empty(self) -> bool:
        return not (self.file_sha or self.tables or self.question_ngrams)

    # -- matching ------------------------------------------------------------------------------
    def match_bytes(self, data: bytes) -> str | None:
        return self.file_sha.get(hashlib.sha256(data).hexdigest())

    def match_table(self, df: pd.DataFrame) -> str | None:
        if df is None or df.empty:
            return None
        schema, rows = table_signature(df)
        for t in self.tables:
            if t["schema"] == schema and rows:
                shared = len(rows & t["rows"])
                if shared >= ROW_OVERLAP * min(len(rows), len(t["rows"])):
                    return f"{t['item']} ({shared} of {len(rows)} rows)"
        return None

    def match_question(self, question: str) -> str | None:
        for g in ngrams(question, self.ngram):
            if g in self.question_ngrams:
                return f"{self.question_ngrams[g]} (shares the {self.ngram}-word run '{g}')"
        return None

    # -- building ------------------------------------------------------------------------------
    def add_file(self, path: str, item: str, parser) -> None:
        """``parser``: an IsolatedParser. A benchmark file is as untrusted as any other: it is parsed in
        the capped child, and one that breaks the reader adds its bytes to the index but no table."""
        with open(path, "rb") as fh:
            self.file_sha[hashlib.sha256(fh.read()).hexdigest()] = item
        result = parser.load(path)
        for t in result.tables:
            if t.df is not None and not t.df.empty:
                schema, rows = table_signature(t.df)
                label = item if len(result.tables) == 1 else f"{item} table {t.name}"
                self.tables.append({"item": label, "schema": schema, "rows": rows})

    def add_question(self, text: str, item: str) -> None:
        for g in ngrams(text, self.ngram):
            self.question_ngrams.setdefault(g, item)

    def to_json(self) -> str:
        tables = [{**t, "rows": sorted(t["rows"])} for t in self.tables]
        payload = {"ngram": self.ngram, "file_sha": self.file_sha, "tables": tables}
        return json.dumps({**payload, "question_ngrams": self.question_ngrams}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BenchmarkIndex:
        d = json.loads(text)
        tables = [{**t, "rows": set(t["rows"])} for t in d["tables"]]
        return cls(d["ngram"], d["file_sha"], tables, d["question_ngrams"])


def build_index(suites: dict[str, str], ngram: int = NGRAM, table_dir: str | None = None) -> BenchmarkIndex:
    """Tables and questions of every configured benchmark (the held-out split is ours: not a benchmark)."""
    from datamind.benchmarks import load_benchmark
    from datamind.formats.parse_worker import IsolatedParser
    from datamind.settings import Limits

    index = BenchmarkIndex(ngram=ngram)
    big = replace(Limits.from_env(), max_rows=10**7, max_db_table_rows=10**7, max_file_bytes=2**34, max_cols=10**4)
    with IsolatedParser(big) as parser:
        for kind, location in sorted(suites.items()):
            if kind == "heldout":
                continue
            loaded = load_benchmark(kind, location, table_dir=table_dir)
            seen: set[str] = set()
            for item in loaded.items:
                label = f"{kind}:{os.path.basename(item.data_path)}"
                if item.data_path not in seen:
                    seen.add(item.data_path)
                    index.add_file(item.data_path, label, parser)
                index.add_question(item.question.split("\n", 1)[0], f"{kind}:{item.item_id}")
    return index


def _stamp(suites: dict[str, str]) -> str:
    """Changes when the configuration or any benchmark file changes."""
    parts = [json.dumps(suites, sort_keys=True)]
    for location in sorted(v for k, v in suites.items() if k != "heldout"):
        paths = (
            [location]
            if os.path.isfile(location)
            else sorted(os.path.join(d, f) for d, _, files in os.walk(location) for f in files)
        )
        for p in paths:
            st = os.stat(p)
            parts.append(f"{p}:{st.st_size}:{int(st.st_mtime)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def benchmark_suites_from_env() -> dict[str, str]:
    raw = os.environ.get("DATAMIND_BENCHMARKS", "").strip()
    if not raw:
        return {}
    try:
        suites = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"DATAMIND_BENCHMARKS must be a JSON object of suite -> folder ({exc.msg})") from None
    if not isinstance(suites, dict):
        raise ValueError("DATAMIND_BENCHMARKS must be a JSON object of suite -> folder")
    return {str(k): str(v) for k, v in suites.items()}


def load_index(root, suites: dict[str, str] | None = None, ngram: int = NGRAM) -> BenchmarkIndex:
    """The index for ``suites`` (default: DATAMIND_BENCHMARKS), built once and cached under the data root."""
    suites = benchmark_suites_from_env() if suites is None else suites
    suites = {k: v for k, v in suites.items() if k != "heldout"}
    if not suites:
        return BenchmarkIndex(ngram=ngram)
    rel = f"{INDEX_DIR}/index-{_stamp(suites)}-{ngram}.json"
    if root.exists(rel):
        return BenchmarkIndex.from_json(root.read_text(rel))
    index = build_index(suites, ngram, table_dir=root.path(INDEX_DIR, "_tables"))
    root.write_text(rel, index.to_json())
    log.info(
        "benchmark index: %d files, %d tables, %d question %d-grams",
        len(index.file_sha),
        len(index.tables),
        len(index.question_ngrams),
        ngram,
    )
    return index
