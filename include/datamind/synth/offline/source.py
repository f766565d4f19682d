"""How a reference solution reaches its data: the program preamble (pandas) or the SQL relation (SQLite).

Every reference solution is a self-contained program text: Python programs read the staged file with
plain pandas (no project imports, so an agent or a sandbox can run them as they are) and print the
answer; SQL solutions run against the staged SQLite file. For SQLite, a table with foreign keys is
presented as the table joined to a readable label column of each parent table, so questions can group
by a parent's name instead of an opaque key.
"""

from __future__ import annotations

import os

import json
import sqlite3
from urllib.parse import quote
from dataclasses import dataclass, field

READERS = ("plain", "tidy", "loader")
_TIDY = (
    "df.columns = [str(c).strip() for c in df.columns]\n"
    "df = df.dropna(how='all').reset_index(drop=True)\n"
    "for col in df.select_dtypes(include=['object', 'string']).columns:\n"
    "    stripped = df[col].str.strip()\n"
    "    df[col] = stripped.mask(stripped == '')\n"
)


class UnsupportedSource(ValueError):
    """The table cannot be read by a plain, self-contained program (recorded as a skip reason)."""


def qi(name: str) -> str:
    """SQL identifier, double-quoted (works for any name, including non-ASCII and keywords)."""
    return '"' + str(name).replace('"', '""') + '"'


def ql(value) -> str:
    """SQL literal for a value drawn from the data (never interpolated raw)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


@dataclass(frozen=True)
class Join:
    fk_column: str
    parent_table: str
    parent_key: str
    label_column: str
    alias: str


@dataclass
class Source:
    fmt: str  # csv | xlsx | sqlite
    data_path: str
    table_name: str
    read_options: dict = field(default_factory=dict)
    joins: list[Join] = field(default_factory=list)
    reader: str = "plain"  # plain | tidy (plain + ingest's cell tidying) | loader (the project's own loader)

    @property
    def file_name(self) -> str:
        return os.path.basename(self.data_path)

    @property
    def solution_lang_default(self) -> str:
        return "sql" if self.fmt == "sqlite" else "python"

    # -- SQL ---------------------------------------------------------------------------------
    def relation_sql(self) -> str:
        """SELECT giving the analysed relation: the table plus joined parent labels."""
        if not self.joins:
            return f"SELECT * FROM {qi(self.table_name)}"
        cols = ["t.*"] + [f"p{i}.{qi(j.label_column)} AS {qi(j.alias)}" for i, j in enumerate(self.joins)]
        parts = [f"SELECT {', '.join(cols)} FROM {qi(self.table_name)} AS t"]
        for i, j in enumerate(self.joins):
            parts.append(
                f"LEFT JOIN {qi(j.parent_table)} AS p{i} ON t.{qi(j.fk_column)} = p{i}.{qi(j.parent_key)}"
            )
        return " ".join(parts)

    def sql_from(self) -> str:
        """What follows FROM in a solution query."""
        return qi(self.table_name) if not self.joins else f"({self.relation_sql()}) AS r"

    # -- Python ------------------------------------------------------------------------------
    def python_imports(self, extra_imports: tuple[str, ...] = ()) -> str:
        imports = ["import pandas as pd", *extra_imports]
        if self.fmt == "sqlite":
            imports[:0] = ["import sqlite3", "from urllib.parse import quote"]
        elif self.reader == "loader":
            imports[:0] = ["import json", "from datamind.ingest.loaders import load_table"]
        return "\n".join(dict.fromkeys(imports)) + "\n"

    def python_preamble(self, extra_imports: tuple[str, ...] = (), *, in_process: bool = False) -> str:
        """Program text that loads the analysed relation into ``df``.

        Stored programs for SQLite load it through the ``execute_sql`` tool, the only way an agent's SQL
        session may read a database; ``in_process=True`` gives the direct sqlite3 form the synthesizer
        itself uses to build its view of the table.
        """
        if self.fmt == "sqlite" and not in_process:
            imports = "\n".join(dict.fromkeys(["import pandas as pd", *extra_imports]))
            return (
                f"{imports}\n\n"
                f"execute_sql(sql={self.relation_sql()!r}, output_path='relation.csv')\n"
                "df = pd.read_csv('relation.csv')\n"
            )
        # The program names its data file relative to its working directory, as the sandbox and any
        # replay present it: the text (and so the query_id) does not depend on where the data root is.
        head = self.python_imports(extra_imports) + "\n" + f"DATA_PATH = {self.file_name!r}\n"
        if self.fmt == "sqlite":
            return head + (
                'con = sqlite3.connect("file:" + quote(DATA_PATH) + "?mode=ro", uri=True)\n'
                f"df = pd.read_sql_query({self.relation_sql()!r}, con)\n"
                "con.close()\n"
            )
        if self.reader == "loader":
            options = json.dumps(self.read_options, sort_keys=True, ensure_ascii=False)
            return head + f"df = load_table(DATA_PATH, json.loads({options!r}))\n"
        args = "".join(f", {k}={v!r}" for k, v in pandas_kwargs(self.fmt, self.read_options).items())
        reader = "pd.read_csv" if self.fmt == "csv" else "pd.read_excel"
        body = f"df = {reader}(DATA_PATH{args})\n"
        return head + body + (_TIDY if self.reader == "tidy" else "")


def pandas_kwargs(fmt: str, options: dict) -> dict:
    """Ingest's read_options -> keyword arguments of pd.read_csv / pd.read_excel.

    Only the simple layouts map onto plain pandas (one header row, no row repairs); anything else
    raises UnsupportedSource and the caller falls back to the project's loader.
    """
    if int(options.get("header_rows", 1)) != 1 or options.get("repair_rows"):
        raise UnsupportedSource("layout needs the project's loader (multi-row header or repaired rows)")
    out: dict = {}
    start = int(options.get("header_start", 0))
    if fmt == "csv":
        for key in ("sep", "encoding", "quotechar", "decimal", "thousands", "compression"):
            if options.get(key) is not None:
                out[key] = options[key]
        if start:
            out["skiprows"] = start
        return out
    if fmt in ("xlsx", "xls"):
        sheet = options.get("sheet", options.get("sheet_name"))
        if sheet is None:
            raise UnsupportedSource("workbook read_options lack a sheet name")
        out["sheet_name"] = sheet
        if start:
            out["header"] = start
        out["engine"] = "calamine"
        return out
    raise UnsupportedSource(f"no pandas reader for format {fmt!r}")


def parse_read_options(raw: str | dict | None) -> dict:
    if raw is None or raw == "":
        return {}
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UnsupportedSource(f"read_options is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise UnsupportedSource("read_options must be a JSON object")
    return value


def _label_column(con: sqlite3.Connection, table: str, key: str) -> str | None:
    """The parent column that names a row: a text column, preferring ones called *name*/*title*."""
    info = con.execute(f"PRAGMA table_info({qi(table)})").fetchall()
    text_cols = [r[1] for r in info if r[1] != key and ("CHAR" in (r[2] or "").upper() or "TEXT" in (r[2] or "").upper())]
    if not text_cols:
        return None

    def score(col: str) -> tuple:
        low = col.lower()
        named = any(w in low for w in ("name", "title", "bezeichnung", "label", "beschreibung", "description"))
        return (not named, text_cols.index(col))

    return sorted(text_cols, key=score)[0]


def sqlite_joins(db_path: str, table: str, foreign_keys: list[dict] | None) -> list[Join]:
    """One join per foreign key of ``table`` whose parent has a readable label column."""
    con = sqlite3.connect(f"file:{quote(db_path)}?mode=ro", uri=True)
    try:
        fks = [fk for fk in (foreign_keys or []) if fk.get("from_table", table) == table]
        if not fks:  # catalog may omit them; the file's own schema is authoritative
            fks = [
                {"from_column": r[3], "to_table": r[2], "to_column": r[4]}
                for r in con.execute(f"PRAGMA foreign_key_list({qi(table)})").fetchall()
            ]
        own = {r[1] for r in con.execute(f"PRAGMA table_info({qi(table)})").fetchall()}
        joins: list[Join] = []
        seen = set(own)
        for fk in fks:
            parent, key = fk["to_table"], fk.get("to_column")
            if not parent or not key or parent == table:
                continue
            label = _label_column(con, parent, key)
            if label is None:
                continue
            alias = label if label not in seen else f"{parent}_{label}"
            if alias in seen:
                alias = f"{fk['from_column']}_{label}"
            if alias in seen:
                continue
            seen.add(alias)
            joins.append(Join(fk["from_column"], parent, key, label, alias))
        return joins
    finally:
        con.close()


def build_source(row: dict, data_path: str, reader: str = "plain") -> Source:
    fmt = row["format"]
    options = parse_read_options(row.get("read_options"))
    if fmt in ("csv", "xlsx", "xls"):
        if reader not in READERS:
            raise ValueError(f"unknown reader {reader!r}")
        if reader != "loader":
            pandas_kwargs(fmt, options)  # raises when plain pandas cannot express the layout
        return Source(fmt, data_path, row["table_name"], options, reader=reader)
    if fmt == "sqlite":
        table = options.get("table") or options.get("table_name") or row["table_name"]
        return Source(fmt, data_path, table, options, sqlite_joins(data_path, table, row.get("foreign_keys")))
    raise UnsupportedSource(f"unsupported format {fmt!r}")
