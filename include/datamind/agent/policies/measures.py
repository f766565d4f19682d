"""How a set of trajectories reads to the model that trains on it: the figures of issue 46 about the thoughts
and the code, computed per sample and summarised.

    python -m datamind.agent.policies.measures <data root | parquet file or glob> [--json PATH]

* ``question_copy_share``: thoughts (``<think>`` blocks) holding 6 or more consecutive words of the question;
* ``first_frames`` / ``last_frames``: distinct frames of the first and last thoughts (their first 4 words, numbers
  and quoted text masked), and ``first_frames_95`` / ``last_frames_95``: how few frames cover 95% of them;
* ``code_shapes``: distinct code cells once literals and names are masked, ``top10_shape_share``;
* ``pasted_literal_share``: multi-step samples in which a later cell writes a number or text the previous step
  printed as a literal instead of the variable holding it;
* ``sql_helper_defs``: samples that define a query helper function; ``select_star_share``: database samples that
  fetch a whole table with ``SELECT *``; ``pandas_fetch_share``: database samples that load rows into pandas;
* ``planted_typo_share``: samples whose error is a column name the schema print spelled otherwise.

Every figure is read from the published messages alone, so it applies to any release, old or new.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import re
import sys
import tokenize
from collections import Counter
from dataclasses import dataclass

from datamind.agent.protocol import strict_turn

COPY_RUN = 6  # consecutive question words that count as a copy
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'|`[^`]*`|“[^”]*”")
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?%?")
_HELPER_DEF = re.compile(r"^def \w+\(sql", re.MULTILINE)
_SELECT_STAR = re.compile(r"SELECT\s+\*\s+FROM", re.IGNORECASE)
_PANDAS_FETCH = re.compile(r"execute_sql\(.*\)\n\s*df = pd\.read_csv\(")
_ERROR = re.compile(r"^(?:Traceback \(most recent call last\)|[\w.]*(?:Error|Exception): )", re.MULTILINE)


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text or "")]


def copies_question(think: str, question: str, run: int = COPY_RUN) -> bool:
    """Whether ``think`` holds ``run`` or more consecutive words of ``question``. A name quoted in backticks (a
    column called "Miles traveled today (midnight to 11:59 pm)") is the data's, not the question's wording: it
    breaks a run instead of extending it."""
    q = words(question)
    grams = {tuple(q[i : i + run]) for i in range(len(q) - run + 1)}
    if not grams:
        return False
    for piece in re.split(r"`[^`]*`", think or ""):
        t = words(piece)
        if any(tuple(t[i : i + run]) in grams for i in range(len(t) - run + 1)):
            return True
    return False


def frame(think: str, n: int = 4) -> str:
    """The opening words of a thought with quoted text and numbers masked: the sentence frame it uses."""
    text = _QUOTED.sub(" Q ", think or "")
    text = _NUMBER.sub(" N ", text)
    return " ".join(w.lower() for w in text.split()[:n])


def code_shape(code: str) -> str:
    """A cell with every literal and every name masked, so only its structure (calls, operators) remains."""
    out: list[str] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.STRING or (
                tok.type == tokenize.FSTRING_START if hasattr(tokenize, "FSTRING_START") else False
            ):
                out.append("S")
            elif tok.type == tokenize.NUMBER:
                out.append("N")
            elif tok.type == tokenize.NAME:
                out.append(tok.string if tok.string in _KEEP_NAMES else "x")
            elif tok.type == tokenize.OP:
                out.append(tok.string)
            elif tok.type in (tokenize.NEWLINE, tokenize.NL):
                out.append(";")
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return re.sub(r"\s+", " ", _NUMBER.sub("N", _QUOTED.sub("S", code)))
    return re.sub(r"(;\s*)+", ";", " ".join(out)).strip(" ;")


# Names that carry the structure of a cell (keywords and the library calls a shape is made of).
_KEEP_NAMES = frozenset(
    "import from as def return if else elif for in not and or is with lambda None True False print "
    "pd np df read_csv read_excel execute_sql get_db_info groupby mean median sum count std max min idxmax idxmin "
    "value_counts loc iloc round float int len sort_values head nunique corr dropna drop_duplicates duckdb sql "
    "fetchall polars pl SQLContext to_datetime to_numeric quantile".split()
)


def _literals(code: str) -> set[str]:
    """Number and string literals a cell writes (strings inside SQL text included)."""
    found: set[str] = set()
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return found
    for tok in toks:
        if tok.type == tokenize.NUMBER:
            found.add(tok.string)
        elif tok.type == tokenize.STRING:
            body = tok.string.strip("rbfuRBFU")[1:-1].strip("'\"")
            found.add(body)
            found |= set(_NUMBER.findall(body))
            found |= {m.strip("'") for m in re.findall(r"'(?:[^']|'')+'", body.replace("\\'", "'"))}
    return found


@dataclass(frozen=True)
class SampleMeasures:
    thinks: int
    copied_thinks: int
    first_frame: str
    last_frame: str
    shapes: tuple[str, ...]
    pasted_literal: bool | None  # None: a single-step sample
    sql_helper_def: bool
    select_star: bool | None  # None: not a database sample
    pandas_fetch: bool | None  # a database sample that loads rows into pandas (None: not a database sample)
    planted_typo: bool


def sample_measures(row: dict) -> SampleMeasures:
    messages = row.get("messages") or []
    question = row.get("question") or ""
    turns = [strict_turn(m["content"]) for m in messages if m["role"] == "assistant"]
    tools = [m["content"] for m in messages if m["role"] == "tool"]
    thinks = [t.think.strip() for t in turns if t.think]
    codes = [t.code for t in turns if t.code]
    hop = int(row.get("hop") or 1)
    pasted: bool | None = None
    if hop > 1:
        pasted = False
        outputs = [_body(o) for o in tools]
        for i in range(1, len(codes)):
            prev = outputs[i - 1] if i - 1 < len(outputs) else ""
            printed = prev.strip()
            # a value a step printed, written into a later cell: a number with a fraction or 4+ digits, or a name
            if not printed or "\n" in printed or len(printed) > 80 or printed in ("True", "False", "Yes", "No"):
                continue
            if _NUMBER.fullmatch(printed) and not re.search(r"\.\d|\d{4}", printed):
                continue
            later = "\n".join(codes[i:])
            if printed in _literals(later) and printed not in "\n".join(codes[:i]):
                pasted = True
                break
    # a failed cell whose next cell differs only in one quoted name: a misspelt column corrected, not a finding
    planted = any(
        _ERROR.search(_body(obs)) and i + 1 < len(codes) and _one_name_changed(codes[i], codes[i + 1])
        for i, obs in enumerate(tools)
    )
    sqlite = row.get("data_format") == "sqlite"
    return SampleMeasures(
        thinks=len(thinks),
        copied_thinks=sum(copies_question(t, question) for t in thinks),
        first_frame=frame(thinks[0]) if thinks else "",
        last_frame=frame(thinks[-1]) if thinks else "",
        shapes=tuple(code_shape(c) for c in codes),
        pasted_literal=pasted,
        sql_helper_def=any(_HELPER_DEF.search(c) for c in codes),
        select_star=any(_SELECT_STAR.search(c) for c in codes) if sqlite else None,
        pandas_fetch=any(_PANDAS_FETCH.search(c) for c in codes) if sqlite else None,
        planted_typo=planted,
    )


def _one_name_changed(a: str, b: str) -> bool:
    qa, qb = _QUOTED.findall(a), _QUOTED.findall(b)
    if len(qa) != len(qb) or _QUOTED.sub("Q", a) != _QUOTED.sub("Q", b):
        return False
    return sum(x != y for x, y in zip(qa, qb, strict=True)) == 1


def _body(content: str) -> str:
    m = re.search(r"<interpreter>\n?(.*?)\n?</interpreter>", content or "", re.DOTALL)
    return m.group(1) if m else (content or "")


def cover(counter: Counter, share: float = 0.95) -> int:
    """How few of the most common keys cover ``share`` of the counts (the frames that cover 95% of thoughts)."""
    total, acc = sum(counter.values()), 0
    for i, (_, n) in enumerate(counter.most_common(), start=1):
        acc += n
        if acc >= share * total:
            return i
    return 0


def summarize(rows: list[dict]) -> dict:
    per = [sample_measures(r) for r in rows]
    n = len(per) or 1
    thinks = sum(p.thinks for p in per) or 1
    firsts, lasts = Counter(p.first_frame for p in per), Counter(p.last_frame for p in per)
    shapes = Counter(s for p in per for s in p.shapes)
    cells = sum(shapes.values()) or 1
    multi = [p for p in per if p.pasted_literal is not None]
    db = [p for p in per if p.select_star is not None]
    return {
        "samples": len(per),
        "question_copy_share": round(sum(p.copied_thinks for p in per) / thinks, 4),
        "samples_with_copy_share": round(sum(p.copied_thinks > 0 for p in per) / n, 4),
        "first_frames": len(firsts),
        "first_frames_95": cover(firsts),
        "last_frames": len(lasts),
        "last_frames_95": cover(lasts),
        "code_cells": sum(shapes.values()),
        "code_shapes": len(shapes),
        "top10_shape_share": round(sum(c for _, c in shapes.most_common(10)) / cells, 4),
        "pasted_literal_share": round(sum(bool(p.pasted_literal) for p in multi) / (len(multi) or 1), 4),
        "multi_step_samples": len(multi),
        "sql_helper_defs": sum(p.sql_helper_def for p in per),
        "select_star_share": round(sum(bool(p.select_star) for p in db) / (len(db) or 1), 4),
        "pandas_fetch_share": round(sum(bool(p.pandas_fetch) for p in db) / (len(db) or 1), 4),
        "planted_typo_share": round(sum(p.planted_typo for p in per) / n, 4),
        "top_first_frames": firsts.most_common(5),
        "top_last_frames": lasts.most_common(5),
    }


def read_rows(target: str) -> list[dict]:
    """Rows of a release: a parquet file or glob, or a data root (its newest ``dataset/v<N>``)."""
    import os

    import pyarrow.parquet as pq

    if os.path.isdir(target):
        versions = sorted(glob.glob(os.path.join(target, "dataset", "v*")), key=lambda p: int(p.rsplit("v", 1)[1]))
        if not versions:
            raise SystemExit(f"{target}: no dataset/v<N> release")
        target = os.path.join(versions[-1], "part-*.parquet")
    paths = sorted(glob.glob(target))
    if not paths:
        raise SystemExit(f"{target}: no parquet files")
    cols = ["question", "messages", "hop", "data_format"]
    return [r for p in paths for r in pq.read_table(p, columns=cols).to_pylist()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target", help="a data root (its newest release) or a parquet file / glob")
    ap.add_argument("--json", default="", help="also write the figures to this file")
    args = ap.parse_args(argv)
    figures = summarize(read_rows(args.target))
    text = json.dumps(figures, indent=2, ensure_ascii=False)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
