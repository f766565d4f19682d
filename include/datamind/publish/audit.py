"""Read a published dataset as a model would learn from it, and measure what it would learn.

    python -m datamind.publish.audit <data root> [--version N] [--enforce] [--json PATH]

Every figure is computed per sample first (so a reviewer can find the offending samples), then
summarised.  The thresholds are the dataset's quality bar: ``--enforce`` exits non-zero when one is
missed, which is how CI holds the demo dataset to it.  ``publish_dataset`` runs the same audit and puts
its figures in the stage's quality summary.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from array import array
from collections import Counter
from dataclasses import dataclass

import numpy as np

from datamind import grounding, references
from datamind.agent.policies.measures import copies_question, cover, frame
from datamind.agent.policies.narration import placeholder_headers, read_view
from datamind.agent.protocol import strict_turn
from datamind.categories import CATEGORY_IDS
from datamind.filters.coherence import unchanged_fix
from datamind.phrasing import answer_form_problem
from datamind.publish import meaning as semantic

# Imports a model cannot have at test time: the pipeline's own code.
_INTERNAL = re.compile(r"^\s*(?:from|import)\s+(?:datamind|datamind_airflow|airflow)\b", re.MULTILINE)
_WARNING = re.compile(r"\w*Warning: ")
_ERROR = re.compile(r"^(?:Traceback \(most recent call last\)|\w+(?:Error|Exception): )", re.MULTILINE)
_REPEATED_WORD = re.compile(r"\b(\w{2,})\s+\1\b", re.IGNORECASE)
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?%?")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'`])")
_UNNAMED = re.compile(r"Unnamed: \d+")
# a later cell that re-reads the file, or drops the unnamed columns it saw, dealt with them
_FIXES = re.compile(r"\bread_(?:csv|excel)\(|execute_sql\(|startswith\('Unnamed: '\)")
# a call that loads data into the session: the same call in two cells loads what the session already holds
_READ_CALL = re.compile(r"\bread_(?:csv|excel|sql_query)\([^()\n]*(?:\([^()\n]*\)[^()\n]*)*\)|\bexecute_sql\([^\n]*")

# name -> (comparison, bound, what it means).  ``min_n``: figures over fewer samples are reported, not judged.
THRESHOLDS: dict[str, tuple[str, float, str]] = {
    "internal_import_share": ("<=", 0.0, "samples whose code imports the pipeline's own packages"),
    "warning_share": ("<=", 0.02, "samples with a Python warning in an observation"),
    "unfixed_placeholder_header_share": ("<=", 0.0, "samples that print 'Unnamed: n' headers and never re-read"),
    "distinct_first_think_ratio": (">=", 0.90, "distinct first <think> texts / samples"),
    "top_sentence_share": ("<=", 0.05, "share of samples containing the most common think sentence"),
    "repeated_word_question_share": ("<=", 0.0, "questions with a doubled word ('total total')"),
    "error_recovery_share": (">=", 0.05, "samples with a failed cell followed by a successful one"),
    "repeated_read_share": ("<=", 0.05, "samples in which two cells make the same data-loading call"),
    "literal_check_share": ("<=", 0.0, "samples with a cell that only compares two numbers to answer yes/no"),
    "unchanged_fix_share": ("<=", 0.0, "samples whose thought announces a fix that leaves the output unchanged"),
    "unknown_name_share": ("<=", 0.0, "questions naming a table or column the data does not have"),
    "unresolved_table_share": ("<=", 0.02, "database questions that do not say which table they are about"),
    "identifier_measure_share": ("<=", 0.0, "questions computing a statistic of a key or code"),
    "nonadditive_sum_share": ("<=", 0.0, "questions adding up a rate, level or price"),
    # what columns and rows mean (publish.meaning, issue 46)
    "aggregate_row_question_share": ("<=", 0.0, "questions over a table with total rows that do not leave them out"),
    "measure_category_share": ("<=", 0.0, "questions grouping by a measure (a count or level used as a label)"),
    "literal_answer_share": ("<=", 0.0, "samples whose code writes the final answer as a literal"),
    "fixed_answer_share": ("<=", 0.0, "answers known before any analysis (in the question, fixed by construction)"),
    "answer_form_mismatch_share": ("<=", 0.0, "final answers not of the form their question asks"),
    # how the thoughts read (agent.policies.measures): restated questions and a few sentence frames teach wording
    "question_copy_share": ("<=", 0.05, "thoughts holding 6 or more consecutive words of the question"),
    "first_frames_95": (">=", 20, "opening frames (4 words, values masked) that cover 95% of first thoughts"),
    "last_frames_95": (">=", 20, "opening frames (4 words, values masked) that cover 95% of last thoughts"),
    # coverage: no file dominates, and the held-out split is the share the release was asked for
    "top_file_share": ("<=", 0.25, "samples from the release's most represented file"),
    "split_fraction_gap": ("<=", 0.05, "distance of the held-out share of samples from the configured fraction"),
    # The offline engine knows each answer it asks for, so a query of its own that publishes nothing is a defect
    # to find. A model's questions and answers are meant to be filtered (by the judge, the reference, the
    # rules): how many survive is its acceptance rate, reported as ``model_yield`` beside the rejections by
    # reason, and a person reads it at the review gate.
    "yield": (">=", 0.85, "offline-engine queries with a published sample / offline-engine queries synthesised"),
}
OFFLINE_QUESTIONS = "offline"  # a sample's ``question_model`` and a query's ``backend`` when the engine wrote it


EXAMPLES = 3  # samples kept per figure to show a reviewer what counts against it
# A per-sample flag and the release figure it counts towards, where the names differ.
_FLAG_FIGURE = {
    "unfixed_placeholder": "unfixed_placeholder_header_share",
    "repeated_word": "repeated_word_question_share",
}


@dataclass(frozen=True)
class SampleFigures:
    internal_import: bool
    warning: bool
    unfixed_placeholder: bool
    error_recovery: bool
    repeated_read: bool  # two cells make the same data-loading call
    literal_check: bool  # a cell compares two number literals to answer yes/no (a judgement needing no code)
    unchanged_fix: bool  # a thought announces a fix and the next output shows the same thing as before
    unknown_name: bool
    unresolved_table: bool | None  # None: not a database question
    identifier_measure: bool
    nonadditive_sum: bool
    aggregate_row_question: bool  # the table has total rows and the question does not leave them out
    measure_category: bool  # the question groups by a measure
    literal_answer: bool  # a code cell writes the final answer as a literal
    fixed_answer: bool  # the answer is known before any analysis
    answer_form_mismatch: bool  # the final answer is not of the form the question asks (phrasing)
    thinks: int
    copied_thinks: int  # thoughts holding 6+ consecutive words of the question
    first_frame: str
    last_frame: str
    first_think: str
    sentences: frozenset[str]
    repeated_word: bool
    answer_words: int
    turns: int


def mask(sentence: str) -> str:
    """A sentence with its numbers replaced, so a template shows up whatever values filled it."""
    return _NUMBER.sub("<N>", sentence.strip())


def sample_figures(row: dict, context: semantic.AuditContext | None = None) -> SampleFigures:
    messages = row.get("messages") or []
    assistant = [m["content"] for m in messages if m["role"] == "assistant"]
    tools = [m["content"] for m in messages if m["role"] == "tool"]
    turns = [strict_turn(a) for a in assistant]  # published turns are well formed: one think, one action
    codes = [t.code or "" for t in turns]
    thinks = [t.think.strip() for t in turns if t.think is not None]
    unfixed = False
    for i, obs in enumerate(tools):
        # the expert's own rule for what is a header problem (a saved 'Unnamed: 0' index is not), on the
        # columns the print listed, else on the placeholder names it shows
        names = read_view(obs).names or list(dict.fromkeys(_UNNAMED.findall(obs)))
        if placeholder_headers(names) and not any(_FIXES.search(c) for c in codes[i + 1 :]):
            unfixed = True
    recovered = any(
        _ERROR.search(obs) and i + 1 < len(tools) and not _ERROR.search(tools[i + 1]) for i, obs in enumerate(tools)
    )
    sentences = frozenset(mask(s) for t in thinks for s in _SENTENCE.split(t) if s.strip())
    question = row.get("question") or ""
    schema = seen_schema(row, tools)
    sqlite = row.get("data_format") == "sqlite"
    facts = context.tables_of(row.get("file_id"), question) if context is not None else []
    answer = row.get("final_answer") or ""
    return SampleFigures(
        aggregate_row_question=semantic.aggregate_row_question(question, facts),
        measure_category=bool(semantic.measure_as_category(question, facts)),
        literal_answer=references.planted_in_cells(codes, answer) is not None,
        fixed_answer=semantic.fixed_answer(question, answer, tools),
        unchanged_fix=unchanged_fix([t.think or "" for t in turns], tools),
        unknown_name=bool(schema and grounding.unknown_names(question, schema)),
        unresolved_table=(bool(schema and grounding.table_unresolved(question, schema)) if sqlite else None),
        identifier_measure=bool(schema and grounding.measured_identifiers(question, schema)),
        nonadditive_sum=bool(schema and grounding.summed_nonadditive(question, schema)),
        internal_import=any(_INTERNAL.search(c) for c in codes),
        warning=any(_WARNING.search(obs) for obs in tools),
        unfixed_placeholder=unfixed,
        error_recovery=recovered,
        repeated_read=_repeats_a_read(codes),
        # a SQL check may sit in a Python string literal with its quotes escaped
        literal_check=any(references.LITERAL_CHECK.search(c.replace("\\'", "'")) for c in codes),
        answer_form_mismatch=bool(answer)
        and answer_form_problem(question, answer, codes[-1] if codes else None) is not None,
        thinks=len(thinks),
        copied_thinks=sum(copies_question(t, question) for t in thinks),
        first_frame=frame(thinks[0]) if thinks else "",
        last_frame=frame(thinks[-1]) if thinks else "",
        first_think=thinks[0] if thinks else "",
        sentences=sentences,
        repeated_word=bool(_REPEATED_WORD.search(row.get("question") or "")),
        answer_words=len((row.get("final_answer") or "").split()),
        turns=len(assistant),
    )


def seen_schema(row: dict, tools: list[str]) -> grounding.Schema | None:
    """The tables and columns the trajectory printed: a database's schema print, else the columns each read
    of the file listed (the table named after the file)."""
    uri = str(row.get("data_uri") or "")
    file_name = uri.rsplit("/", 1)[-1]
    for obs in tools:
        schema = grounding.schema_from_db_print(obs, file_name)
        if schema is not None:
            return schema
    columns: list[str] = []
    for obs in tools:
        columns += [n for n in read_view(obs).names if n not in columns]
    return grounding.Schema({file_name or "data": columns}, file_name=file_name) if columns else None


def _repeats_a_read(codes: list[str]) -> bool:
    seen: set[str] = set()
    for code in codes:
        calls = {re.sub(r"\s+", "", m.group(0)) for m in _READ_CALL.finditer(code)}
        if calls & seen:
            return True
        seen |= calls
    return False


NO_WRITER = "(none)"  # a sample written before releases recorded its writer (what the viewer's filters show)


def writer_label(model: str | None) -> str:
    """A sample's writer as the audit counts it and the viewer filters it: the model, or ``(none)``."""
    return str(model) if model else NO_WRITER


def _by_count(counts: Counter[str]) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _quantiles(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    qs = statistics.quantiles(values, n=10, method="inclusive") if len(values) > 1 else [values[0]] * 9
    return {"min": min(values), "p10": qs[0], "median": statistics.median(values), "p90": qs[-1], "max": max(values)}


@dataclass(frozen=True)
class Synthesised:
    """The questions synthesised under a data root: the offline engine's per category, and how many a model
    wrote (the denominators of ``yield`` and ``model_yield``)."""

    offline: dict[str, int]
    by_model: int = 0

    @classmethod
    def of(cls, root) -> Synthesised:
        """Counted in Arrow, one column pair of every query, never a Python object per query."""
        import pyarrow.compute as pc

        from datamind import tables
        from datamind.assets import DIRS
        from datamind.shards import column_counts

        if not root.exists(DIRS["queries"]):
            return cls({})
        q = tables.read(root, "queries", ["category", "backend"])
        engine = pc.fill_null(pc.equal(q["backend"], OFFLINE_QUESTIONS), True)
        return cls(column_counts(q.filter(engine), "category"), q.num_rows - pc.sum(engine.cast("int64")).as_py())


def audit_rows(
    rows: list[dict],
    queries: Synthesised | None = None,
    context: semantic.AuditContext | None = None,
    held_out: set[str] | None = None,
    test_fraction: float | None = None,
) -> dict:
    """The audit's figures for published dataset rows (``queries``: the questions synthesised, for the yields;
    ``context``: the catalog's facts of their tables; ``held_out``, ``test_fraction``: the split, see
    ``AuditTally.figures``)."""
    tally = AuditTally(context)
    for row in rows:
        tally.add(row)
    return tally.figures(queries, held_out, test_fraction)


class _SentenceCounts:
    """How many samples hold each sentence (by its hash), exact, in about 24 bytes a distinct sentence: a
    dict with its objects took ten times that, and a real model writes millions of distinct sentences over
    a large release. Hashes wait in a typed array and are folded every ``fold`` of them into sorted numpy
    arrays: distinct hashes, their counts and the position each was first seen at.

    A sentence's text and first sample ids are kept while it is among those seen since the last fold, and
    at a fold for the ``keep`` best ranked (count, then first seen). The final leader ranks first at every
    fold after its last occurrence, so its text is always there; its examples are its first samples, unless
    it ranked below ``keep`` at an earlier fold of a large release (then the first ones since)."""

    def __init__(self, fold: int = 1 << 14, keep: int = 64) -> None:
        self.fold, self.keep = fold, keep
        self.pending = array("q")
        self.seen = 0  # stream position of pending[0]
        self.hashes = np.empty(0, np.int64)
        self.counts = np.empty(0, np.int64)
        self.first = np.empty(0, np.int64)
        self.texts: dict[int, str] = {}
        self.examples: dict[int, list[str]] = {}

    def add(self, key: int, text: str, sample_id: str | None) -> None:
        self.pending.append(key)
        self.texts.setdefault(key, text)
        held = self.examples.setdefault(key, [])
        if sample_id and len(held) < EXAMPLES:
            held.append(sample_id)
        if len(self.pending) >= self.fold:
            self._fold()

    def _fold(self) -> None:
        if not self.pending:
            return
        new_keys, at, counts = np.unique(np.frombuffer(self.pending, np.int64), return_index=True, return_counts=True)
        pos = np.searchsorted(self.hashes, new_keys)
        known = pos < len(self.hashes)
        known[known] = self.hashes[pos[known]] == new_keys[known]
        self.counts[pos[known]] += counts[known]
        fresh = ~known
        self.hashes = np.insert(self.hashes, pos[fresh], new_keys[fresh])
        self.counts = np.insert(self.counts, pos[fresh], counts[fresh])
        self.first = np.insert(self.first, pos[fresh], at[fresh] + self.seen)
        self.seen += len(self.pending)
        self.pending = array("q")
        best = set(self.hashes[self._ranked(self.keep)].tolist())
        self.texts = {k: v for k, v in self.texts.items() if k in best}
        self.examples = {k: v for k, v in self.examples.items() if k in best and v}

    def _ranked(self, k: int) -> np.ndarray:
        """Indices of the ``k`` best ranked, the best first when k is 1: most counted, then first seen (one
        int64 key, partitioned)."""
        rank = -self.counts * (1 << 40) + self.first  # a release holds far fewer than 2**40 sentences
        if len(rank) <= k:
            return np.argsort(rank)
        return np.argpartition(rank, k)[:k]

    def top(self) -> tuple[str, int, list[str]]:
        """The most held sentence (the first seen among equals): its text, its count, example sample ids."""
        self._fold()
        if not len(self.hashes):
            return "", 0, []
        i = int(self._ranked(1)[0])
        key = int(self.hashes[i])
        return self.texts.get(key, ""), int(self.counts[i]), self.examples.get(key, [])


class AuditTally:
    """The audit taken one sample at a time, so a release of any size is audited in one pass without
    holding its rows: what grows with the release is a few bytes a sample and a sentence (typed arrays),
    never a Python object per sample. Sentences and first thoughts are counted by their hash (equal within
    the process)."""

    _FLAGS = (
        "internal_import",
        "warning",
        "unfixed_placeholder",
        "repeated_word",
        "error_recovery",
        "repeated_read",
        "literal_check",
        "unchanged_fix",
        "unknown_name",
        "identifier_measure",
        "nonadditive_sum",
        "aggregate_row_question",
        "measure_category",
        "literal_answer",
        "fixed_answer",
        "answer_form_mismatch",
    )

    def __init__(self, context: semantic.AuditContext | None = None) -> None:
        """``context``: what profiling learned of the release's tables (``semantic.load_context``); without it the
        figures that need it (aggregate rows, measures as categories) count nothing."""
        self.context = context
        self.n = 0
        self.flags: Counter[str] = Counter()
        self.verified = 0
        self.database = 0  # database samples, and those whose question names no table
        self.unresolved = 0
        self.first_thinks = array("q")
        self.thinks = self.copied_thinks = 0
        self.frames: dict[str, Counter[str]] = {"first": Counter(), "last": Counter()}
        self.per_file: Counter[str] = Counter()
        self.sentences = _SentenceCounts()
        self.per_category: Counter[str] = Counter()
        self.offline_per_category: Counter[str] = Counter()  # samples whose question the offline engine wrote
        # who wrote each sample: its trajectory's model, and that model -> its question's model -> samples
        self.per_model: Counter[str] = Counter()
        self.per_writers: dict[str, Counter[str]] = {}
        self.answer_words = array("q")
        self.turns_per_hop: dict[int, array] = {}
        # figure -> the first samples that count against it, so a reviewer can open them
        self.examples: dict[str, list[str]] = {}

    def _example(self, figure: str, sample_id: str | None) -> None:
        found = self.examples.setdefault(figure, [])
        if sample_id and len(found) < EXAMPLES:
            found.append(sample_id)

    def add(self, row: dict) -> None:
        f = sample_figures(row, self.context)
        sid = row.get("sample_id")
        self.n += 1
        for name in self._FLAGS:
            if getattr(f, name):
                self.flags[name] += 1
                self._example(_FLAG_FIGURE.get(name, f"{name}_share"), sid)
        self.verified += row.get("answer_check") == "verified"
        if f.unresolved_table is not None:
            self.database += 1
            self.unresolved += f.unresolved_table
            if f.unresolved_table:
                self._example("unresolved_table_share", sid)
        self.first_thinks.append(hash(f.first_think))
        self.thinks += f.thinks
        self.copied_thinks += f.copied_thinks
        if f.copied_thinks:
            self._example("question_copy_share", sid)
        self.frames["first"][f.first_frame] += 1
        self.frames["last"][f.last_frame] += 1
        self.per_file[row.get("file_id") or ""] += 1
        for sentence in sorted(f.sentences):  # sorted: ties for the top sentence go to the same one every run
            self.sentences.add(hash(sentence), sentence, sid)
        self.per_category[row.get("category")] += 1
        if (row.get("question_model") or OFFLINE_QUESTIONS) == OFFLINE_QUESTIONS:
            self.offline_per_category[row.get("category")] += 1
        model, question_model = writer_label(row.get("model")), writer_label(row.get("question_model"))
        self.per_model[model] += 1
        self.per_writers.setdefault(model, Counter())[question_model] += 1
        self.answer_words.append(f.answer_words)
        if row.get("hop") is not None:
            self.turns_per_hop.setdefault(row["hop"], array("q")).append(f.turns)

    def figures(
        self,
        queries: Synthesised | None = None,
        held_out: frozenset[str] | set[str] | None = None,
        test_fraction: float | None = None,
    ) -> dict:
        """The release's figures; ``queries``: the questions synthesised, the yields' denominators; ``held_out``
        (the files of the test split) and ``test_fraction`` (the share it was configured to hold) add how far the
        split's share of samples is from that fraction."""
        n = self.n
        top_text, top_count, top_examples = self.sentences.top()
        share = {name: round(self.flags[name] / n, 4) if n else 0.0 for name in self._FLAGS}
        out: dict = {
            "n_samples": n,
            "internal_import_share": share["internal_import"],
            "warning_share": share["warning"],
            "unfixed_placeholder_header_share": share["unfixed_placeholder"],
            "distinct_first_think_ratio": round(len(np.unique(np.frombuffer(self.first_thinks, np.int64))) / n, 4)
            if n
            else 0.0,
            "top_sentence_share": round(top_count / n, 4) if n else 0.0,
            "top_sentence": top_text,
            "repeated_word_question_share": share["repeated_word"],
            "error_recovery_share": share["error_recovery"],
            "repeated_read_share": share["repeated_read"],
            "literal_check_share": share["literal_check"],
            "unchanged_fix_share": share["unchanged_fix"],
            "unknown_name_share": share["unknown_name"],
            "unresolved_table_share": round(self.unresolved / self.database, 4) if self.database else 0.0,
            "identifier_measure_share": share["identifier_measure"],
            "nonadditive_sum_share": share["nonadditive_sum"],
            "aggregate_row_question_share": share["aggregate_row_question"],
            "measure_category_share": share["measure_category"],
            "literal_answer_share": share["literal_answer"],
            "fixed_answer_share": share["fixed_answer"],
            "answer_form_mismatch_share": share["answer_form_mismatch"],
            "question_copy_share": round(self.copied_thinks / self.thinks, 4) if self.thinks else 0.0,
            "first_frames_95": cover(self.frames["first"]),
            "last_frames_95": cover(self.frames["last"]),
            "n_files": len(self.per_file),
            "top_file_share": round(max(self.per_file.values()) / n, 4) if n else 0.0,
            "verified_share": round(self.verified / n, 4) if n else 0.0,
            "samples_per_category": {c: self.per_category.get(c, 0) for c in CATEGORY_IDS},
            # who wrote the samples (the viewer's "written by" filter): trajectory model -> samples, and
            # trajectory model -> question model -> samples, most samples first
            "samples_per_model": _by_count(self.per_model),
            "samples_per_writers": {m: _by_count(self.per_writers[m]) for m in _by_count(self.per_model)},
            "answer_words": _quantiles(self.answer_words.tolist()),
            "turns_per_hop": {str(h): _quantiles(self.turns_per_hop[h].tolist()) for h in sorted(self.turns_per_hop)},
        }
        if queries is not None and queries.offline:
            offline = sum(self.offline_per_category.values())
            out["yield"] = round(offline / sum(queries.offline.values()), 4)
            out["yield_per_category"] = {
                c: round(self.offline_per_category.get(c, 0) / q, 4) for c, q in sorted(queries.offline.items()) if q
            }
        if queries is not None and queries.by_model:
            out["model_yield"] = round((n - sum(self.offline_per_category.values())) / queries.by_model, 4)
        if test_fraction is not None and n:
            test_share = sum(c for f, c in self.per_file.items() if f in (held_out or ())) / n
            out["test_split_share"] = round(test_share, 4)
            out["test_fraction"] = test_fraction
            out["split_fraction_gap"] = round(abs(test_share - test_fraction), 4)
        out["misses"] = misses(out)
        examples = {k: v for k, v in self.examples.items() if v}
        if top_examples:
            examples["top_sentence_share"] = top_examples
        out["examples"] = examples
        return out


# Figures that say little about a small release, judged from this many samples on (reported below it): a few
# repeated openings swing the first-think ratio; one or two files' samples share their first look at the data
# (the same rows, columns and types); and a clean file has no real error to recover from, while recoveries are
# never planted.
MIN_SAMPLES = {
    "distinct_first_think_ratio": (500, "a few repeated openings swing the ratio"),
    "top_sentence_share": (100, "samples of one file share their first look at its rows, columns and types"),
    "error_recovery_share": (100, "recoveries come only from real errors, which a few clean files need not have"),
}
MIN_THINK_SAMPLES = MIN_SAMPLES["distinct_first_think_ratio"][0]
MIN_SAMPLES["first_frames_95"] = (200, "a small release holds few thoughts to vary their openings over")
MIN_SAMPLES["last_frames_95"] = MIN_SAMPLES["first_frames_95"]
# Figures judged from this many files on: whole files cannot spread a release evenly, or split it at a fraction,
# when there are only a few of them.
MIN_FILES = {
    "top_file_share": (10, "one file of a few holds a large share whatever the cap"),
    "split_fraction_gap": (10, "a split by whole files cannot come close to the fraction"),
}


def verdicts(figures: dict) -> list[dict]:
    """Every threshold with its figure: name, value, comparison, bound, meaning, ``ok`` (None: not judged, for a
    figure of ``MIN_SAMPLES`` on a release smaller than its minimum, with ``why_not_judged``) and the example
    samples that count against it."""
    rows = []
    examples = figures.get("examples") or {}
    for name, (op, bound, meaning) in THRESHOLDS.items():
        if name not in figures:
            continue
        value = figures[name]
        least, why = MIN_SAMPLES.get(name, (0, ""))
        files, why_files = MIN_FILES.get(name, (0, ""))
        judged = figures["n_samples"] >= least and figures.get("n_files", files) >= files
        ok = (value <= bound if op == "<=" else value >= bound) if judged else None
        row = {"name": name, "value": value, "op": op, "bound": bound, "meaning": meaning, "ok": ok}
        if figures["n_samples"] < least:
            row["why_not_judged"] = (
                f"judged on {least}+ samples only; this release has {figures['n_samples']}: on fewer, {why}"
            )
        elif not judged:
            row["why_not_judged"] = (
                f"judged on {files}+ files only; this release has {figures['n_files']}: on fewer, {why_files}"
            )
        rows.append({**row, "examples": list(examples.get(name, []))})
    return rows


def misses(figures: dict) -> list[str]:
    """Thresholds the figures miss, in words (figures of ``MIN_SAMPLES`` only on releases large enough)."""
    return [
        f"{v['name']} = {v['value']} (want {v['op']} {v['bound']}: {v['meaning']})"
        for v in verdicts(figures)
        if v["ok"] is False
    ]


def missed_figures(figures: dict) -> list[str]:
    """The names of the thresholds ``figures`` miss."""
    return [v["name"] for v in verdicts(figures) if v["ok"] is False]


def audit_version(root, version: int | None = None) -> dict:
    """Audit a published version under a data root (the newest complete one by default)."""
    from datamind.assets import DIRS
    from datamind.schemas import DATASET
    from datamind.shards import read_rows
    from datamind.storage import DataRoot
    from datamind.tables import read_manifest

    root = root if isinstance(root, DataRoot) else DataRoot(str(root))
    manifest = read_manifest(root, version)
    if manifest is None:
        raise SystemExit(f"no complete dataset version under {root.url}")
    rows = read_rows(root, DATASET, f"{DIRS['dataset']}/v{manifest['version']}")
    held_out = {r["file_id"] for r in rows if r.get("split") == "test"}
    figures = audit_rows(
        rows,
        Synthesised.of(root),
        semantic.load_context(root),
        held_out=held_out,
        test_fraction=manifest.get("test_fraction"),
    )
    figures["version"] = manifest["version"]
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m datamind.publish.audit", description=__doc__.split("\n\n")[0])
    parser.add_argument("data_root", help="data root (local path or fsspec URL)")
    parser.add_argument("--version", type=int, default=None, help="dataset version number (default: newest)")
    parser.add_argument("--enforce", action="store_true", help="exit 1 when a threshold is missed")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    figures = audit_version(args.data_root, args.version)
    text = json.dumps(figures, indent=2, ensure_ascii=False)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(text)
    if figures["misses"]:
        print("MISSED: " + "; ".join(figures["misses"]), file=sys.stderr)
        return 1 if args.enforce else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
