"""Row builders for every table the quality suites cover: each returns schema-valid rows that tests then break
one defect at a time. (A plain module, imported by the test modules next to it.)"""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd

from datamind import schemas
from datamind.settings import Limits

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
LIMITS = Limits(min_rows=20, max_rows=1000, max_cols=200)
SHA = "ab" * 32


def file_row(i: int, **over) -> dict:
    row = dict(
        file_id=f"f{i}",
        source="local",
        source_uri=f"/in/f{i}.csv",
        rel_path=f"f{i}.csv",
        format="csv",
        declared_format="csv",
        status="accepted",
        content_sha256=SHA,
        size_bytes=2048,
        encoding="utf-8",
        n_tables=1,
        n_rows=50,
        n_cols=4,
        staged_uri=f"raw/local/f{i}/f{i}.csv",
        table_verdicts=[dict(table_name="t", status="accepted", n_rows=50, n_cols=4)],
        ingested_at=NOW,
        run_id="r1",
    )
    row.update(over)
    return row


def rejected_file_row(i: int, reason_code: str, reason: str = "why", **over) -> dict:
    return file_row(
        i,
        status="rejected",
        reason_code=reason_code,
        reason=reason,
        n_tables=0,
        n_rows=None,
        n_cols=None,
        staged_uri=None,
        table_verdicts=[],
        **over,
    )


def table_row(i: int, **over) -> dict:
    row = dict(
        table_id=f"t{i}",
        file_id=f"f{i}",
        source="local",
        format="csv",
        table_name=f"table{i}",
        n_rows=50,
        n_cols=3,
        columns=["a", "b", "c"],
        staged_uri=f"raw/local/f{i}/f{i}.csv",
        profiled_at=NOW,
        run_id="r1",
    )
    row.update(over)
    return row


def query_row(i: int, **over) -> dict:
    row = dict(
        query_id=f"q{i}",
        file_id="f1",
        table_id="t1",
        data_format="csv",
        category="aggregation",
        hop=1,
        parent_query_ids=[],
        question=f"What is the total of column a in slice {i}?",
        solution_lang="python",
        backend="offline",
        prompt_tokens=10,
        completion_tokens=5,
        created_at=NOW,
        run_id="r1",
    )
    row.update(over)
    return row


def messages(final: str = "42") -> list[dict]:
    return [
        dict(role="system", content="You analyse data."),
        dict(role="user", content="What is the total?"),
        dict(role="assistant", content="Thought: sum it.\nAction: df.a.sum()"),
        dict(role="user", content="Observation: 42"),
        dict(role="assistant", content=f"Answer: {final}"),
    ]


def trajectory_row(i: int, query_id: str = "q1", sample_index: int = 0, reflection_round: int = 0, **over) -> dict:
    row = dict(
        trajectory_id=f"tr{i}",
        query_id=query_id,
        sample_index=sample_index,
        reflection_round=reflection_round,
        messages=messages(),
        final_answer="42",
        n_turns=2,
        n_void_turns=0,
        status="answered",
        model="m",
        created_at=NOW,
        run_id="r1",
    )
    row.update(over)
    return row


def sample_row(i: int, query_id: str | None = None, reflection_round: int = 0, **over) -> dict:
    row = dict(
        sample_id=f"s{i}",
        query_id=query_id or f"q{i}",
        trajectory_id=f"tr{i}",
        file_id="f1",
        data_format="csv",
        category="ranking",
        hop=2,
        question="Which region ranks first by total sales?",
        messages=messages("north"),
        final_answer="north",
        judge_verdict="consistent",
        reflection_round=reflection_round,
        created_at=NOW,
    )
    row.update(over)
    return row


def rejection_row(i: int, stage: str = "synth", reason_code: str = "parse_error", **over) -> dict:
    row = dict(item_id=f"x{i}", stage=stage, reason_code=reason_code, reason="bad", created_at=NOW, run_id="r1")
    row.update(over)
    return row


def eval_row(i: int, trial: int = 0, correct: bool = True, **over) -> dict:
    row = dict(
        eval_id="eval-1",
        suite="dabench",
        item_id=f"dabench-{i}",
        trial=trial,
        category="Summary Statistics",
        question="What is the mean fare?",
        gold="@mean_fare[34.65]",
        final_answer="@mean_fare[34.65]" if correct else "@mean_fare[1]",
        correct=correct,
        outcome="correct" if correct else "wrong",
        judge="rule:dabench",
        status="answered",
        n_turns=2,
        messages=messages("@mean_fare[34.65]"),
        created_at=NOW,
    )
    row.update(over)
    return row


def frame(table: str, rows: list[dict]) -> pd.DataFrame:
    """Rows through the declared schema (as a stage writes them) and back to pandas (as a reader gets them)."""
    return schemas.ALL[table].to_table(rows).to_pandas()


VALID_ROWS = {
    "eval_results": lambda: [eval_row(1), eval_row(1, trial=1, correct=False), eval_row(2, suite="heldout")],
    "catalog_files": lambda: [file_row(1), file_row(2), rejected_file_row(3, "too_small")],
    "catalog_tables": lambda: [table_row(1), table_row(2, format="xlsx", n_cols=2, columns=["x", "y"])],
    "queries": lambda: [
        query_row(1),
        query_row(2, category="comparison"),
        query_row(
            3,
            hop=3,
            parent_query_ids=["q1", "q2"],
            root_query_id="q1",
            category="multi_hop_numerical_reasoning",
            solution_lang="sql",
            data_format="sqlite",
        ),
    ],
    "trajectories": lambda: [
        trajectory_row(1, sample_index=0),
        trajectory_row(2, sample_index=1, n_turns=3, n_void_turns=1),
        trajectory_row(3, sample_index=2, status="max_turns", final_answer=None),
    ],
    "dataset": lambda: [sample_row(1), sample_row(2, category="counting", hop=1)],
    "rejections": lambda: [rejection_row(1), rejection_row(2, stage="judge", reason_code="inconsistent")],
}
