"""Recursive easy-to-hard composition: chains of 2-5 hops where each hop consumes the previous result.

A chain starts from an executed single-hop question (hop 1). Each next hop is a harder question
whose wording nests the previous question (so answering it requires solving the previous one first),
while its reference solution embeds the previous hop's *printed result* as a literal: replaying the
chain turn by turn, the output of one step is exactly the input of the next. Values flow with a type:

    group  (a value of a grouping column)  -> level, group, count
    level  (a value on a measure's scale)  -> count, group, diff, yes/no
    count  (a number of records)           -> pct, yes/no
    diff   (a signed difference)           -> pct
    pct    (a percentage)                  -> yes/no
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from datamind.ids import stable_id
from datamind.synth.offline.columns import TableView
from datamind.synth.offline.engine import build_solution, execute
from datamind.synth.offline.execute import ExecutionError
from datamind.synth.offline.generators import Task, an, c, unique_top
from datamind.synth.offline.source import Source, qi, ql

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Value:
    kind: str  # group | level | count | diff | pct | bool
    value: object
    col: str | None  # the grouping column (group) or measure (level, diff)
    phrase: str  # noun phrase that describes how this value was obtained


@dataclass
class Hop:
    task: Task
    lang: str
    solution: str
    answer: str
    value: Value


Step = Callable[[TableView, Value, random.Random], "tuple[Task, str, str | None, str] | None"]
# A step returns (task, result kind, result column, result phrase), or None when it does not apply.


def _pick(items, rng):
    items = list(items)
    return items[rng.randrange(len(items))] if items else None


# -- roots (hop 1) -----------------------------------------------------------------------------


def root_top_count(view, rng):
    g = _pick([g for g in view.groups if unique_top(view.df[g].value_counts())], rng)
    if g is None:
        return None
    task = Task(
        "ranking",
        "chain_top_count",
        f"Which {g} value has the most records?",
        f"Mode of {g}.",
        f"answer = {c(g)}.value_counts().idxmax()",
        f"SELECT {qi(g)} FROM {{src}} WHERE {qi(g)} IS NOT NULL GROUP BY {qi(g)} ORDER BY COUNT(*) DESC LIMIT 1",
        params={"g": g},
    )
    return task, "group", g, f"the {g} value with the most records"


def root_top_mean(view, rng):
    pairs = [(g, m) for g in view.groups for m in view.measures if g != m and unique_top(view.df.groupby(g)[m].mean())]
    pick = _pick(pairs, rng)
    if pick is None:
        return None
    g, m = pick
    task = Task(
        "ranking",
        "chain_top_mean",
        f"Which {g} has the highest average {m}?",
        f"Group by {g}, rank by mean {m}.",
        f"answer = df.groupby({g!r})[{m!r}].mean().idxmax()",
        f"SELECT {qi(g)} FROM {{src}} WHERE {qi(g)} IS NOT NULL AND {qi(m)} IS NOT NULL GROUP BY {qi(g)} "
        f"ORDER BY AVG({qi(m)}) DESC LIMIT 1",
        params={"g": g, "m": m},
    )
    return task, "group", g, f"the {g} with the highest average {m}"


def root_mean(view, rng):
    m = _pick(view.measures, rng)
    if m is None:
        return None
    task = Task(
        "aggregation",
        "chain_mean",
        f"What is the average {m} across all records?",
        f"Mean of {m}.",
        f"answer = round(float({c(m)}.mean()), 4)",
        f"SELECT ROUND(AVG({qi(m)}), 4) FROM {{src}}",
        params={"m": m},
    )
    return task, "level", m, f"the average {m} across all records"


ROOTS = (root_top_count, root_top_mean, root_mean)


# -- transitions -------------------------------------------------------------------------------


def group_mean(view, prev: Value, rng):
    g, v = prev.col, prev.value
    m = _pick([m for m in view.measures if m != g and view.df.loc[view.df[g] == v, m].notna().any()], rng)
    if m is None:
        return None
    task = Task(
        "aggregation",
        "chain_group_mean",
        f"What is the average {m} among records whose {g} is {prev.phrase}?",
        f"Average {m} inside the {g} group found by the previous step.",
        f"answer = round(float(df.loc[{c(g)} == {v!r}, {m!r}].mean()), 4)",
        f"SELECT ROUND(AVG({qi(m)}), 4) FROM {{src}} WHERE {qi(g)} = {ql(v)}",
        params={"g": g, "v": v, "m": m},
    )
    return task, "level", m, f"the average {m} among records whose {g} is {prev.phrase}"


def group_mode(view, prev: Value, rng):
    g, v = prev.col, prev.value
    sub = view.df[view.df[g] == v]
    g2 = _pick([x for x in view.groups if x != g and unique_top(sub[x].value_counts())], rng)
    if g2 is None:
        return None
    task = Task(
        "ranking",
        "chain_group_mode",
        f"Among records whose {g} is {prev.phrase}, which {g2} value is most common?",
        f"Restrict to the previous step's {g} group, then take the mode of {g2}.",
        f"answer = df.loc[{c(g)} == {v!r}, {g2!r}].value_counts().idxmax()",
        f"SELECT {qi(g2)} FROM {{src}} WHERE {qi(g)} = {ql(v)} AND {qi(g2)} IS NOT NULL GROUP BY {qi(g2)} "
        f"ORDER BY COUNT(*) DESC LIMIT 1",
        params={"g": g, "v": v, "g2": g2},
    )
    return task, "group", g2, f"the most common {g2} among records whose {g} is {prev.phrase}"


def group_count(view, prev: Value, rng):
    g, v = prev.col, prev.value
    task = Task(
        "counting",
        "chain_group_count",
        f"How many records have {an(g)} {g} equal to {prev.phrase}?",
        f"Count the rows of the {g} group found by the previous step.",
        f"answer = int(({c(g)} == {v!r}).sum())",
        f"SELECT COUNT(*) FROM {{src}} WHERE {qi(g)} = {ql(v)}",
        params={"g": g, "v": v},
    )
    return task, "count", None, f"the number of records whose {g} is {prev.phrase}"


def level_count_above(view, prev: Value, rng):
    m, x = prev.col, prev.value
    n = int((view.df[m] > x).sum())
    if n == 0:
        return None
    task = Task(
        "counting",
        "chain_count_above",
        f"How many records have {an(m)} {m} greater than {prev.phrase}?",
        f"Use the previous result as a threshold on {m}.",
        f"answer = int(({c(m)} > {x!r}).sum())",
        f"SELECT COUNT(*) FROM {{src}} WHERE {qi(m)} > {ql(x)}",
        params={"m": m, "x": x},
    )
    return task, "count", None, f"the number of records with {an(m)} {m} greater than {prev.phrase}"


def level_mode_above(view, prev: Value, rng):
    m, x = prev.col, prev.value
    sub = view.df[view.df[m] > x]
    if sub.empty:
        return None
    g = _pick([g for g in view.groups if g != m and unique_top(sub[g].value_counts())], rng)
    if g is None:
        return None
    task = Task(
        "ranking",
        "chain_mode_above",
        f"Among records with {an(m)} {m} above {prev.phrase}, which {g} value is most common?",
        f"Filter {m} by the previous result, then take the mode of {g}.",
        f"answer = df.loc[{c(m)} > {x!r}, {g!r}].value_counts().idxmax()",
        f"SELECT {qi(g)} FROM {{src}} WHERE {qi(m)} > {ql(x)} AND {qi(g)} IS NOT NULL GROUP BY {qi(g)} "
        f"ORDER BY COUNT(*) DESC LIMIT 1",
        params={"m": m, "x": x, "g": g},
    )
    return task, "group", g, f"the most common {g} among records with {an(m)} {m} above {prev.phrase}"


def level_diff_median(view, prev: Value, rng):
    m, x = prev.col, prev.value
    task = Task(
        "comparison",
        "chain_diff_median",
        f"How much does {prev.phrase} differ from the overall median {m} (first minus second)?",
        f"Compare the previous result with the median of {m}.",
        f"answer = round(float({x!r} - {c(m)}.median()), 4)",
        params={"m": m, "x": x},
    )
    return task, "diff", m, f"the difference between {prev.phrase} and the overall median {m}"


def level_fact(view, prev: Value, rng):
    m, x = prev.col, prev.value
    if np.isclose(x, view.df[m].median()):
        return None
    task = Task(
        "fact_checking",
        "chain_fact_level",
        f"Is {prev.phrase} higher than the overall median {m}? Answer Yes or No.",
        f"Check a claim about the previous result against the median of {m}.",
        f"answer = 'Yes' if {x!r} > {c(m)}.median() else 'No'",
        params={"m": m, "x": x},
    )
    return task, "bool", None, ""


def count_pct(view, prev: Value, rng):
    n = prev.value
    task = Task(
        "arithmetic_calculation",
        "chain_count_pct",
        f"What percentage of all records is {prev.phrase}?",
        "Divide the previous count by the number of records.",
        f"answer = round({n!r} / len(df) * 100, 2)",
        f"SELECT ROUND(100.0 * {ql(n)} / COUNT(*), 2) FROM {{src}}",
        params={"n": n},
    )
    return task, "pct", None, f"the percentage of all records represented by {prev.phrase}"


def count_fact(view, prev: Value, rng):
    n = prev.value
    if n * 2 == view.n_rows:
        return None
    task = Task(
        "fact_checking",
        "chain_fact_count",
        f"Is {prev.phrase} more than half of all records? Answer Yes or No.",
        "Compare the previous count with half the table.",
        f"answer = 'Yes' if {n!r} > len(df) / 2 else 'No'",
        f"SELECT CASE WHEN {ql(n)} > COUNT(*) / 2.0 THEN 'Yes' ELSE 'No' END FROM {{src}}",
        params={"n": n},
    )
    return task, "bool", None, ""


def diff_pct(view, prev: Value, rng):
    m, d = prev.col, prev.value
    mean = view.df[m].mean()
    if np.isclose(mean, 0):
        return None
    task = Task(
        "arithmetic_calculation",
        "chain_diff_pct",
        f"Express {prev.phrase} as a percentage of the overall average {m}.",
        f"Scale the previous difference by the mean of {m}.",
        f"answer = round(float({d!r} / {c(m)}.mean() * 100), 2)",
        params={"m": m, "d": d},
    )
    return task, "pct", None, f"{prev.phrase} as a percentage of the overall average {m}"


def pct_fact(view, prev: Value, rng):
    p = prev.value
    if p == 50:
        return None
    task = Task(
        "fact_checking",
        "chain_fact_pct",
        f"Is {prev.phrase} above 50 percent? Answer Yes or No.",
        "Compare the previous percentage with one half.",
        f"answer = 'Yes' if {p!r} > 50 else 'No'",
        f"SELECT CASE WHEN {ql(p)} > 50 THEN 'Yes' ELSE 'No' END",
        params={"p": p},
    )
    return task, "bool", None, ""


TRANSITIONS: dict[str, tuple] = {
    "group": (group_mean, group_mode, group_count),
    "level": (level_count_above, level_mode_above, level_diff_median, level_fact),
    "count": (count_pct, count_fact),
    "diff": (diff_pct,),
    "pct": (pct_fact,),
    "bool": (),
}


# -- chain building ----------------------------------------------------------------------------


def _typed(kind: str, answer: str, col: str | None, view: TableView):
    """The printed answer as the typed value the next hop embeds."""
    if kind == "group":
        for v in view.df[col].dropna().unique():
            if str(v) == answer:
                return v.item() if hasattr(v, "item") else v
        raise ExecutionError(f"group answer {answer!r} is not a value of {col!r}")
    if kind == "count":
        return int(answer)
    if kind in ("level", "diff", "pct"):
        return float(answer)
    return answer


def _try(step, view: TableView, *args):
    """A root or step that raises on odd data simply does not apply here."""
    try:
        return step(view, *args)
    except Exception as exc:  # noqa: BLE001 - logged, then treated as "not applicable"
        log.debug("composition step %s skipped: %s: %s", step.__name__, type(exc).__name__, exc)
        return None


def _run(view: TableView, source: Source, made) -> Hop | None:
    if made is None:
        return None
    task, kind, col, phrase = made
    lang, solution = build_solution(task, source)
    try:
        answer = execute(lang, solution, source, task, view)
        value = Value(kind, _typed(kind, answer, col, view), col, phrase)
    except (ExecutionError, ValueError):
        return None
    return Hop(task, lang, solution, answer, value)


def build_chain(view: TableView, source: Source, length: int, rng: random.Random) -> list[Hop]:
    """One chain of exactly ``length`` hops, or [] when the table cannot support that many."""
    for root in rng.sample(ROOTS, len(ROOTS)):
        hops: list[Hop] = []
        hop = _run(view, source, _try(root, view, rng))
        if hop is None:
            continue
        hops.append(hop)
        while len(hops) < length:
            prev = hops[-1]
            steps = list(TRANSITIONS[prev.value.kind])
            # A yes/no ends a chain, so only take it as the final hop.
            if len(hops) + 1 < length:
                steps = [s for s in steps if not s.__name__.endswith("fact")] or []
            rng.shuffle(steps)
            nxt = None
            for step in steps:
                made = _try(step, view, prev.value, rng)
                if made is not None:
                    task, kind, col, phrase = made
                    task.description = f"{task.description} Builds on the previous question: {prev.task.question}"
                nxt = _run(view, source, made)
                if nxt is not None:
                    break
            if nxt is None:
                break
            hops.append(nxt)
        if len(hops) == length:
            return hops
    return []


def build_chains(
    view: TableView, source: Source, n_chains: int, min_hops: int, max_hops: int, seed: int, table_key: str
) -> list[list[Hop]]:
    chains: list[list[Hop]] = []
    seen: set[str] = set()
    for i in range(n_chains * 3):  # a few extra attempts: random walks can repeat or dead-end
        if len(chains) >= n_chains:
            break
        rng = random.Random(stable_id(seed, table_key, "chain", i))
        chain = build_chain(view, source, rng.randint(min_hops, max_hops), rng)
        if chain and chain[-1].task.question not in seen:
            seen.add(chain[-1].task.question)
            chains.append(chain)
    return chains
