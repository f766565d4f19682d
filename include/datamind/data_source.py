"""How a reference solution reaches its data: the program preamble (pandas) or the SQL relation (SQLite).

Every reference solution is a self-contained program text: Python programs read the staged file with
plain pandas (no project imports, so an agent or a sandbox can run them as they are) and print the
answer; SQL solutions run against the staged SQLite file. For SQLite, a table with foreign keys may
reach a readable label column of each parent table, so questions can group by a parent's name instead of
an opaque key. Such a column goes by its schema name, ``Parent.Column`` ("Genre.Name"), never an alias of
our own, and a program joins only the parents its question names (``Source.narrowed``).

A staged file is untrusted: ``open_source`` (what a reader needs of the file: a workbook's sheets, a
database's schema and joins, then the frame its preamble loads) runs in the capped parser child
(``IsolatedParser.call``), never in the synthesizing process; only the ``Source`` and the frame come back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import sqlite3
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import quote

from datamind.grounding import Schema, schema_of_database

if TYPE_CHECKING:
    import pandas as pd

READERS = ("plain", "tidy", "repair")
# What the tidy reader adds to a plain read: trimmed names, empty unnamed columns and rows dropped, text cells trimmed
TIDY = (
    "df.columns = [str(c).strip() for c in df.columns]\n"
    "df = df.loc[:, [c for c in df.columns if not (c.startswith('Unnamed: ') and df[c].isna().all())]]\n"
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
class Exclusion:
    """The aggregate rows a table holds (totals of other rows, found at profiling: ``profile.semantics``), as
    the values of one column that name exactly them. Every program on the table leaves them out right after
    reading it, and every question says so; the filter is idempotent, so a session that runs it again on the
    frame it already filtered changes nothing."""

    column: str
    values: tuple  # the column's values on the aggregate rows (text labels, or the amounts of a row without one)

    def python(self) -> str:
        """The pandas line that leaves the aggregate rows out of ``df``."""
        return (
            "# leave out the aggregate rows (totals of other rows)\n"
            f"df = df[~df[{self.column!r}].isin({list(self.values)!r})].reset_index(drop=True)\n"
        )

    def sql_condition(self, prefix: str = "") -> str:
        """The WHERE condition that keeps every other row (a NULL label is kept, as pandas' ``isin`` keeps it)."""
        col = prefix + qi(self.column)
        return f"({col} IS NULL OR {col} NOT IN ({', '.join(ql(v) for v in self.values)}))"

    def sentence(self) -> str:
        """What the question says about them."""
        shown = [f"'{v}'" if isinstance(v, str) else _number_text(v) for v in self.values]
        listed = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]
        rows = "row" if len(shown) == 1 else "rows"
        return f"Leave out the aggregate {rows} whose {self.column} is {listed}: they total other rows."


def _number_text(v) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


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
    # plain | tidy (plain + ingest's cell tidying) | repair (a sheet read without a header, its header
    # row(s) picked and its title/footnote rows dropped by hand, as an analyst fixes a report-style sheet)
    reader: str = "plain"
    siblings: tuple[str, ...] = ()  # the other tables (sheets) of the same file: a question must name its own
    columns: tuple[str, ...] = ()  # the table's own columns (SQLite), for programs that select only what they use
    # what get_db_info() prints of the database (SQLite), read with the source so no later step opens the file
    schema: Schema | None = None
    exclude: Exclusion | None = None  # aggregate rows every program leaves out

    @property
    def scope(self) -> tuple[str, str] | None:
        """(noun, name) a question names its table by ("table", "orders") when the file holds more than one."""
        if not self.siblings:
            return None
        return ("table" if self.fmt == "sqlite" else "sheet", self.table_name)

    def narrowed(self, text: str) -> Source:
        """This source with only the parent joins whose columns ``text`` (a task's question and programs)
        names: a program joins what its question needs, nothing more."""
        used = [j for j in self.joins if j.alias in text]
        return self if used == self.joins else dataclasses.replace(self, joins=used)

    @property
    def file_name(self) -> str:
        return os.path.basename(self.data_path)

    @property
    def solution_lang_default(self) -> str:
        return "sql" if self.fmt == "sqlite" else "python"

    # -- SQL ---------------------------------------------------------------------------------
    def relation_sql(self) -> str:
        """SELECT giving the analysed relation: the table plus joined parent labels (without aggregate rows)."""
        if not self.joins:
            where = f" WHERE {self.exclude.sql_condition()}" if self.exclude else ""
            return f"SELECT * FROM {qi(self.table_name)}{where}"
        return self._joined(["t.*"] + [f"p{i}.{qi(j.label_column)} AS {qi(j.alias)}" for i, j in enumerate(self.joins)])

    def sql_from(self) -> str:
        """What follows FROM in a solution query (``r`` is the joined relation's CTE, see ``with_relation``)."""
        return qi(self.table_name) if not self.joins and not self.exclude else "r"

    def with_relation(self, sql: str) -> str:
        """A solution query over the analysed relation: the join named once in a CTE that selects the
        columns the statement uses, then a short statement over it, the way an analyst writes it (not one
        nested subquery)."""
        body = sql.replace("{src}", self.sql_from())
        if not self.joins and not self.exclude:
            return body
        own = [c for c in self.columns if qi(c) in body]
        if not self.columns or re.search(r"SELECT\s+\*|\br\.\*", body, re.IGNORECASE):
            picked = ["t.*"]
        else:
            picked = [f"t.{qi(c)}" for c in own]
        cols = picked + [f"p{i}.{qi(j.label_column)} AS {qi(j.alias)}" for i, j in enumerate(self.joins)]
        return f"WITH r AS (\n  {self._joined(cols)}\n)\n{body}"

    def _joined(self, cols: list[str]) -> str:
        parts = [f"SELECT {', '.join(cols)} FROM {qi(self.table_name)} AS t"]
        for i, j in enumerate(self.joins):
            parts.append(f"LEFT JOIN {qi(j.parent_table)} AS p{i} ON t.{qi(j.fk_column)} = p{i}.{qi(j.parent_key)}")
        if self.exclude:
            parts.append(f"WHERE {self.exclude.sql_condition('t.')}")
        return " ".join(parts)

    # -- Python ------------------------------------------------------------------------------
    def python_imports(self, extra_imports: tuple[str, ...] = ()) -> str:
        imports = ["import pandas as pd", *extra_imports]
        if self.fmt == "sqlite":
            imports[:0] = ["import sqlite3", "from urllib.parse import quote"]
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
        leave_out = self.exclude.python() if self.exclude else ""
        if self.reader == "repair":
            return head + repair_sheet_code(self.read_options) + leave_out
        args = "".join(f", {k}={v!r}" for k, v in pandas_kwargs(self.fmt, self.read_options).items())
        reader = "pd.read_csv" if self.fmt == "csv" else "pd.read_excel"
        body = f"df = {reader}(DATA_PATH{args})\n"
        return head + body + (TIDY if self.reader == "tidy" else "") + leave_out


# The first look a session takes at a file (``inspect_code``) reads it with pandas' defaults; these are they.
_DEFAULT_READ = {
    "csv": {"sep": ",", "quotechar": '"', "decimal": ".", "encoding": "utf-8"},
    "xlsx": {"engine": "calamine"},
}


def default_read_suffices(block: str | None, fmt: str, options: dict, file_name: str) -> bool:
    """Whether ``block`` (a ``reading_block``) loads the frame a default read of the file gives: the plain
    reader, with options that are pandas' defaults (the sheet aside). A session that looked at the data
    with a default read then already holds ``df`` as every step would read it."""
    defaults = _DEFAULT_READ.get(fmt)
    if block is None or defaults is None:
        return False
    try:
        plain = Source(fmt, file_name, "", options, reader="plain").python_preamble()
        kwargs = pandas_kwargs(fmt, options)
    except UnsupportedSource:
        return False
    if block != "import pandas as pd\n\n" + plain[plain.index("DATA_PATH = ") :]:
        return False
    kwargs.pop("sheet_name", None)
    # ASCII is a subset of UTF-8, and pandas drops a UTF-8 byte-order mark by itself: both read the same
    if str(kwargs.get("encoding", "")).lower() in ("ascii", "utf-8-sig", "utf_8_sig"):
        kwargs["encoding"] = "utf-8"
    return all(defaults.get(k) == v for k, v in kwargs.items())


def repair_sheet_code(options: dict) -> str:
    """Plain pandas that reads a report-style sheet: title rows above the header, one or more header rows
    (group labels spread over the columns they cover), blank rows and footnotes below the table."""
    sheet = options.get("sheet", options.get("sheet_name"))
    if sheet is None:
        raise UnsupportedSource("workbook read_options lack a sheet name")
    start, n = int(options.get("header_start", 0)), int(options.get("header_rows", 1))
    # keep_default_na=False: a label such as "None" or "NA" is data; only empty cells are missing.
    lines = [
        f"raw = pd.read_excel(DATA_PATH, sheet_name={sheet!r}, header=None, engine='calamine',",
        "                    keep_default_na=False, na_values=[''])",
        "",
        "def label(v):  # header cells may hold dates or whole numbers stored as floats",
        "    if pd.isna(v):",
        "        return ''",
        "    if isinstance(v, float) and v.is_integer():",
        "        return str(int(v))",
        "    if hasattr(v, 'isoformat'):",
        "        midnight = hasattr(v, 'hour') and (v.hour, v.minute, v.second, v.microsecond) == (0, 0, 0, 0)",
        "        return v.date().isoformat() if midnight else v.isoformat()",
        "    return ' '.join(str(v).split())",
        "",
    ]
    if n == 1:
        lines.append(f"names = [label(v) for v in raw.iloc[{start}]]")
    else:
        lines += [
            f"header = raw.iloc[{start}:{start + n}].astype(object)",
            "header.iloc[:-1] = header.iloc[:-1].ffill(axis=1)  # a group label covers the columns after it",
            "names = [' '.join(dict.fromkeys(label(v) for v in header[c] if label(v))) for c in header.columns]",
        ]
    lines += [
        f"df = raw.iloc[{start + n}:].copy()",
        "df.columns = [name or f'Unnamed: {i}' for i, name in enumerate(names)]",
        "df = df.dropna(how='all')",
    ]
    if options.get("trim_footer"):
        lines += [
            "while len(df) and df.iloc[-1].notna().sum() <= 1:  # notes under the table",
            "    df = df.iloc[:-1]",
        ]
    lines.append("df = df.reset_index(drop=True).infer_objects()")
    return "\n".join(lines) + "\n" + TIDY


def reading_block(program: str, fmt: str, options: dict, file_name: str) -> str | None:
    """The part of a stored file program that reads its data into ``df`` (imports reduced to pandas),
    or None when the program does not start with one of this table's readings."""
    if fmt not in ("csv", "xlsx"):
        return None
    for reader in READERS:
        try:
            preamble = Source(fmt, file_name, "", options, reader=reader).python_preamble()
        except UnsupportedSource:
            continue
        block = preamble[preamble.index("DATA_PATH = ") :]
        if block in program:
            return "import pandas as pd\n\n" + block
    return None


def pandas_kwargs(fmt: str, options: dict) -> dict:
    """Ingest's read_options -> keyword arguments of pd.read_csv / pd.read_excel.

    Only the simple layouts map onto plain pandas (one header row, no row repairs); anything else
    raises UnsupportedSource (workbooks then try the ``repair`` reader).
    """
    if int(options.get("header_rows", 1)) != 1 or options.get("repair_rows"):
        raise UnsupportedSource("layout needs more than one pandas call (multi-row header or repaired rows)")
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
    text_cols = [
        r[1] for r in info if r[1] != key and ("CHAR" in (r[2] or "").upper() or "TEXT" in (r[2] or "").upper())
    ]
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
        # a parent two keys point at ("origin" and "destination" airport) has no one meaning as Parent.Column
        targets = [fk["to_table"] for fk in fks]
        for fk in fks:
            parent, key = fk["to_table"], fk.get("to_column")
            if not parent or not key or parent == table or targets.count(parent) > 1:
                continue
            label = _label_column(con, parent, key)
            if label is None:
                continue
            alias = f"{parent}.{label}"  # the schema's own name for the column, whatever the table
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
        if reader == "repair":
            if fmt == "csv":
                raise UnsupportedSource("a CSV whose rows needed repairs has no plain pandas reading")
        else:
            pandas_kwargs(fmt, options)  # raises when plain pandas cannot express the layout
        siblings = tuple(n for n in _sheet_names(data_path) if n != row["table_name"]) if fmt != "csv" else ()
        return Source(fmt, data_path, row["table_name"], options, reader=reader, siblings=siblings)
    if fmt == "sqlite":
        table = options.get("table") or options.get("table_name") or row["table_name"]
        schema = schema_of_database(data_path, os.path.basename(data_path))
        joins = sqlite_joins(data_path, table, row.get("foreign_keys"))
        siblings = tuple(t for t in schema.tables if t != table)
        columns = tuple(schema.tables.get(table, ()))
        return Source(fmt, data_path, table, options, joins, siblings=siblings, columns=columns, schema=schema)
    raise UnsupportedSource(f"unsupported format {fmt!r}")


def read_frame(source: Source) -> pd.DataFrame:
    """The frame ``source``'s own preamble loads (run in the file's folder: programs name it relatively)."""
    namespace: dict = {}
    with contextlib.chdir(os.path.dirname(os.path.abspath(source.data_path))):
        exec(compile(source.python_preamble(in_process=True), "<preamble>", "exec"), namespace)  # noqa: S102
    return namespace["df"]


def open_source(row: dict, data_path: str, reader: str) -> tuple[Source, pd.DataFrame]:
    """(how ``reader`` reads the table, the frame it loads): every read of the staged file synthesis makes.
    Runs in the capped parser child (``IsolatedParser.call``): keep this module's imports light."""
    source = build_source(row, data_path, reader)
    return source, read_frame(source)


@functools.lru_cache(maxsize=64)  # staged files never change (named by content), and each reader asks again
def _sheet_names(path: str) -> tuple[str, ...]:
    try:
        from python_calamine import CalamineWorkbook

        return tuple(CalamineWorkbook.from_path(path).sheet_names)
    except Exception:  # noqa: BLE001 - a workbook calamine cannot list is read by name like before
        return ()
