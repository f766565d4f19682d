"""Recursive easy-to-hard composition: chains of 2-5 hops where each hop consumes the previous result.

A chain starts from an executed single-hop question (hop 1). Each next hop is a harder question that
first restates, as ordered steps, how the previous value is obtained, then asks something about that
value ("First, find the region with the most records. Next, take the average price of that region's
records. How many records cost more than that average?"), so answering it requires solving every
earlier step. Its reference solution embeds the previous hop's *printed result* as a literal:
replaying the chain turn by turn, the output of one step is exactly the input of the next.

Values flow with a type, and each step names the category of the analysis it performs (17 of the 18
categories appear; only domain-specific knowledge has no generic step):

    group   (a value of a grouping column)  -> level, group, count, spread, diff, corr, days
    level   (a value on a measure's scale)  -> count, group, diff, pct, ratio, yes/no
    spread  (a standard deviation)          -> count (outliers), pct
    count   (a number of records)           -> pct, yes/no
    distinct (a number of distinct values)  -> nothing: divided by the row count it means nothing
    diff    (a signed difference)           -> pct, yes/no
    pct / ratio / corr / days               -> yes/no
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Collection
from dataclasses import dataclass

from datamind import references
from datamind.data_source import Source
from datamind.ids import stable_id
from datamind.phrasing import STEP_FIRST, STEP_NEXT
from datamind.synth.offline.columns import TableView
from datamind.synth.offline.engine import Rejected, answer_problem, build_solution, execute
from datamind.synth.offline.execute import ExecutionError
from datamind.synth.offline.generators import Task
from datamind.synth.offline.steps import (
    ROOTS,
    TRANSITIONS,
    YIELDS,
    FixedByConstruction,
    Made,
    Value,
    can_continue,
    say,
)

log = logging.getLogger(__name__)


@dataclass
class Hop:
    task: Task
    lang: str
    solution: str
    answer: str
    value: Value


def compose_question(steps: tuple[str, ...], ask: str, rng: random.Random) -> str:
    """One multi-step question: the steps that produce the previous value, in order, then the ask."""
    if not steps:
        return ask
    parts = [say(rng, *STEP_FIRST).format(steps[0])]
    last = None
    for s in steps[1:]:
        last = say(rng, *[t for t in STEP_NEXT if t != last])  # no "Then ... Then ..."
        parts.append(last.format(s))
    parts.append(ask[0].upper() + ask[1:])
    return " ".join(parts)


def _typed(kind: str, answer: str, col: str | None, view: TableView):
    """The printed answer as the typed value the next hop embeds."""
    if kind == "group":
        for v in view.df[col].dropna().unique():
            if str(v) == answer:
                return v.item() if hasattr(v, "item") else v
        raise ExecutionError(f"group answer {answer!r} is not a value of {col!r}")
    if kind in ("count", "distinct", "days"):
        return int(answer)
    if kind in ("level", "spread", "diff", "pct", "ratio", "corr"):
        value = float(answer)
        if not math.isfinite(value):
            raise ExecutionError(f"non-finite {kind} {answer!r}")
        return value
    return answer


def _try(step, view: TableView, *args, rejected: list[Rejected] | None = None):
    """A root or step that raises on odd data simply does not apply here; one whose answer the chain's
    construction already fixes is recorded in ``rejected`` with its reason."""
    try:
        return step(view, *args)
    except FixedByConstruction as exc:
        if rejected is not None:
            rejected.append(Rejected(exc.task, references.FIXED_BY_CONSTRUCTION, exc.reason))
        return None
    except Exception as exc:  # noqa: BLE001 - logged, then treated as "not applicable"
        log.debug("composition step %s skipped: %s: %s", step.__name__, type(exc).__name__, exc)
        return None


# The steps that combine the previous value with a column compare like with like: a level, spread or gap of a
# measure is only ever set against that same measure (its unit), never another one.
_SAME_UNIT = ("level", "spread", "diff")
_MEASURE_PARAMS = ("m", "m1", "m2", "x", "y", "a", "b")  # a step's parameters that name measures (or hold values)


def mixes_units(view: TableView, task: Task, prev: Value) -> bool:
    """Whether a step sets a level, spread or gap of one measure against another measure (a mean price against
    a count of units): the steps that take such a value compare it with its own measure only."""
    if prev.kind not in _SAME_UNIT:
        return False
    named = {v for k, v in task.params.items() if k in _MEASURE_PARAMS and isinstance(v, str) and v in view.measures}
    return bool(named - {prev.col})


def _run(
    view: TableView,
    source: Source,
    made: Made | None,
    prev: Value | None,
    rng: random.Random,
    rejected: list[Rejected] | None = None,
) -> Hop | None:
    if made is None:
        return None
    task = made.task
    if prev is not None and mixes_units(view, task, prev):
        log.debug("composition step %s sets %s's value against another measure", task.template, prev.col)
        return None
    steps = prev.steps if prev is not None else ()
    task.question = compose_question(steps, task.question, rng)
    if prev is not None:
        task.description = f"{task.description} Builds on the previous question: {prev.steps[-1]}."
    lang, solution = build_solution(task, source)
    try:
        answer = execute(lang, solution, source, task, view)
        value = Value(
            made.kind,
            _typed(made.kind, answer, made.col, view),
            made.col,
            made.ref,
            (*steps, made.step),
            made.share_max,
        )
    except (ExecutionError, ValueError):
        return None
    problem = answer_problem(task, lang, solution, answer, view)
    if problem is not None:
        if rejected is not None:
            rejected.append(Rejected(task, *problem, solution))
        return None
    return Hop(task, lang, solution, answer, value)


def returns_to(hops: list[Hop], hop: Hop) -> Hop | None:
    """The earlier hop whose value ``hop`` comes back to (the same value of the same column: Turin -> its most
    common business -> Turin), or None. A chain that loops asks nothing new."""
    v = hop.value
    for h in hops:
        w = h.value
        if w.kind != v.kind or w.col != v.col:
            continue
        same = (
            math.isclose(float(w.value), float(v.value), rel_tol=1e-9)
            if isinstance(v.value, (int, float)) and isinstance(w.value, (int, float))
            else w.value == v.value
        )
        if same:
            return h
    return None


def build_chain(
    view: TableView,
    source: Source,
    length: int,
    rng: random.Random,
    root_categories: Collection[str] | None = None,
    rejected: list[Rejected] | None = None,
) -> list[Hop]:
    """One chain of exactly ``length`` hops, or [] when the table cannot support that many; its first hop is
    of one of ``root_categories`` when given. Steps dropped for what their answer is go to ``rejected``."""
    for root in rng.sample(ROOTS, len(ROOTS)):
        hops: list[Hop] = []
        made = _try(root, view, rng, rejected=rejected)
        if made is not None and root_categories is not None and made.task.category not in root_categories:
            continue  # decided before its program runs (a root's _run draws nothing from rng)
        hop = _run(view, source, made, None, rng, rejected)
        if hop is None:
            continue
        hops.append(hop)
        while len(hops) < length:
            prev = hops[-1]
            steps = list(TRANSITIONS[prev.value.kind])
            if len(hops) + 1 < length:  # not the last hop: its value must feed another step
                steps = [s for s in steps if can_continue(s)]
            rng.shuffle(steps)
            if rng.random() < 0.5:  # a yes/no check may close any chain; keep it from closing most of them
                steps.sort(key=lambda s: YIELDS[s] == "bool")
            nxt = None
            for step in steps:
                made = _try(step, view, prev.value, rng, rejected=rejected)
                nxt = _run(view, source, made, prev.value, rng, rejected)
                # a step that runs an earlier hop's program again (a mode of a mode that came back to the
                # same value) adds nothing to solve: take another
                if nxt is not None and all(nxt.solution != h.solution for h in hops):
                    back = returns_to(hops, nxt)
                    if back is None:
                        break
                    if rejected is not None:
                        rejected.append(
                            Rejected(
                                nxt.task,
                                references.CHAIN_LOOP,
                                f"the chain comes back to {back.answer!r}, found at hop {hops.index(back) + 1}",
                                nxt.solution,
                            )
                        )
                nxt = None
            if nxt is None:
                break
            hops.append(nxt)
        if len(hops) == length:
            return hops
    return []


def build_chains(
    view: TableView,
    source: Source,
    n_chains: int,
    min_hops: int,
    max_hops: int,
    seed: int,
    table_key: str,
    root_categories: Collection[str] | None = None,
    rejected: list[Rejected] | None = None,
) -> list[list[Hop]]:
    chains: list[list[Hop]] = []
    seen: set[str] = set()
    for i in range(n_chains * 3):  # a few extra attempts: random walks can repeat or dead-end
        if len(chains) >= n_chains:
            break
        rng = random.Random(stable_id(seed, table_key, "chain", i))
        chain = build_chain(view, source, rng.randint(min_hops, max_hops), rng, root_categories, rejected)
        if chain and chain[-1].task.question not in seen:
            seen.add(chain[-1].task.question)
            chains.append(chain)
    return chains
