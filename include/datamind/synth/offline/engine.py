"""Offline engine: pick templates per category, build full reference programs, execute them.

The output is a list of :class:`Candidate` (single-hop, executed, with answers) plus skip records for
categories the table cannot support. Selection is seeded per (seed, table, category), so the same
inputs always give the same questions.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from datamind import references
from datamind.data_source import Source
from datamind.ids import stable_id
from datamind.phrasing import answer_form_problem
from datamind.synth.offline import templates  # noqa: F401 - registers every template in REGISTRY
from datamind.synth.offline.columns import TableView
from datamind.synth.offline.execute import ExecutionError, run_body_on_frame, run_solution
from datamind.synth.offline.generators import REGISTRY, Task, task_text

MAX_ANSWER_CHARS = 500
_COUNTS = re.compile(r"\bhow many\b", re.IGNORECASE)
DEGENERATE = re.compile(r"(^|[\s,])(nan|inf|-inf|None|NaT|<NA>)($|[\s,])")

# What a table must offer for each category; used as the skip reason when no template applies.
REQUIREMENTS = {
    "aggregation": "a numeric measure column",
    "ranking": "a numeric measure plus a grouping or label column with a unique leader",
    "counting": "a numeric measure or a grouping column",
    "comparison": "a numeric measure and a grouping column with two populated groups",
    "domain_specific": (
        "a non-negative measure with a grouping column, a price series with dates, or a measure with non-zero mean"
    ),
    "causal_analysis": "two numeric measures (and a grouping column to stratify by)",
    "statistical_analysis": "a numeric measure column",
    "correlation_analysis": "two numeric measures with variance",
    "arithmetic_calculation": "a numeric measure column",
    "descriptive_analysis": "a numeric measure or a grouping column",
    "impact_analysis": "two numeric measures, or a measure and a grouping column",
    "fact_checking": "a numeric measure and a grouping column",
    "anomaly_detection": "a numeric measure column",
    "multi_hop_numerical_reasoning": "a numeric measure and a grouping column",
    "time_based_calculation": "a date column or a year column",
    "distribution_analysis": "a numeric measure column with variance",
    "feature_engineering": "a numeric measure or a date column",
    "comprehensive_data_preprocessing": (
        "blanks or duplicate rows to clean, a measure to impute and scale, or a grouping column to encode"
    ),
}


@dataclass
class Candidate:
    task: Task
    lang: str
    solution: str
    answer: str


@dataclass
class Skip:
    category: str
    reason_code: str
    reason: str


@dataclass(frozen=True)
class Rejected:
    """A question synthesis made and dropped for what its answer is (``datamind.references``): recorded with its
    reason, never silently skipped."""

    task: Task
    code: str  # literal_answer | answer_in_question | answer_is_row_count | fixed_by_construction | chain_loop |
    # answer_form_mismatch
    reason: str
    solution: str = ""


@dataclass
class OfflineResult:
    candidates: dict[str, list[Candidate]] = field(default_factory=dict)
    skips: list[Skip] = field(default_factory=list)
    failures: list[tuple[Task, str]] = field(default_factory=list)  # (task, error) of dropped candidates
    rejected: list[Rejected] = field(default_factory=list)  # executed questions whose answer is no analysis


def build_solution(task: Task, source: Source) -> tuple[str, str]:
    """(lang, program text): SQL over the relation for SQLite when the task has one, else pandas."""
    source = source.narrowed(task_text(task))
    if source.fmt == "sqlite" and task.sql:
        return "sql", source.with_relation(task.sql)
    program = source.python_preamble(task.imports) + "\n" + task.py + "\nprint(answer)\n"
    return "python", program


def task_frame(task: Task, source: Source, view: TableView):
    """The frame a task's program loads: the table plus only the parent columns the task names."""
    unused = [j.alias for j in source.joins if j not in source.narrowed(task_text(task)).joins]
    return view.df.drop(columns=unused) if unused else view.df


def execute(lang: str, solution: str, source: Source, task: Task | None = None, view: TableView | None = None) -> str:
    """Run a candidate and validate its answer; Python bodies run on the view's loaded frame when given."""
    if lang == "python" and task is not None and view is not None:
        answer = run_body_on_frame(source.python_imports(task.imports), task.py, task_frame(task, source, view))
    else:
        answer = run_solution(lang, solution, source.data_path)
    if not answer:
        raise ExecutionError("empty answer")
    if len(answer) > MAX_ANSWER_CHARS:
        raise ExecutionError(f"answer longer than {MAX_ANSWER_CHARS} characters")
    if DEGENERATE.search(answer):
        raise ExecutionError(f"degenerate answer {answer!r}")
    return answer


def answer_problem(task: Task, lang: str, solution: str, answer: str, view: TableView) -> tuple[str, str] | None:
    """(reason code, reason) when an executed question teaches no analysis: its program writes the answer as a
    literal, its question states the answer, the answer is the table's row count (what the first look at the
    data prints; nothing was computed), or the answer is not of the form the question asks."""
    literal = references.planted_answer(solution, answer, lang)
    if literal is not None:
        return references.LITERAL_ANSWER, f"the reference program writes its answer as the literal {literal}"
    if references.answer_in_question(task.question, answer):
        return references.ANSWER_IN_QUESTION, f"the question states its answer {answer!r}"
    if answer.strip() == str(view.n_rows) and _COUNTS.search(task.question):
        return references.ANSWER_IS_ROW_COUNT, (
            f"the answer {answer!r} is the table's row count, which the first look at the data prints"
        )
    form = answer_form_problem(task.question, answer, solution)
    if form is not None:
        return references.ANSWER_FORM_MISMATCH, form
    return None


def _round_robin(iterators: list[tuple[str, Iterator[Task]]]) -> Iterator[Task | tuple[str, Exception]]:
    """Lazily alternate between templates, so a category's questions use different templates first
    and a template's data checks only run when its candidate is actually needed. A template that
    raises on odd data is retired and reported as ``(name, exception)``; the others carry on."""
    active = list(iterators)
    while active:
        for item in list(active):
            name, it = item
            try:
                yield next(it)
            except StopIteration:
                active.remove(item)
            except Exception as exc:  # noqa: BLE001 - reported to the caller as a dropped template
                active.remove(item)
                yield name, exc


def synthesize_offline(
    view: TableView, source: Source, categories: tuple[str, ...], per_category: int, seed: int, table_key: str
) -> OfflineResult:
    result = OfflineResult()
    for category in categories:
        iterators = [
            (gen.__name__, gen(view, random.Random(stable_id(seed, table_key, category, gen.__name__))))
            for gen in REGISTRY.get(category, [])
        ]
        chosen: list[Candidate] = []
        offered = errored = 0
        for task in _round_robin(iterators):
            if len(chosen) >= per_category:
                break
            if isinstance(task, tuple):
                name, exc = task
                result.failures.append(
                    (Task(category, name, "", "", ""), f"template error: {type(exc).__name__}: {exc}")
                )
                errored += 1
                continue
            offered += 1
            lang, solution = build_solution(task, source)
            try:
                answer = execute(lang, solution, source, task, view)
            except ExecutionError as exc:
                result.failures.append((task, str(exc)))
                continue
            problem = answer_problem(task, lang, solution, answer, view)
            if problem is not None:
                result.rejected.append(Rejected(task, *problem, solution))
                continue
            chosen.append(Candidate(task, lang, solution, answer))
        if per_category > 0 and not offered and errored:
            result.skips.append(
                Skip(category, "template_error", "every applicable template failed on this data (see log)")
            )
        elif per_category > 0 and not offered:
            result.skips.append(Skip(category, "unsupported_table", f"needs {REQUIREMENTS[category]}"))
        elif per_category > 0 and not chosen:
            result.skips.append(
                Skip(
                    category,
                    "no_valid_candidate",
                    "every candidate question failed to execute or gave a degenerate answer",
                )
            )
        result.candidates[category] = chosen
    return result
