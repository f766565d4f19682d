"""Summary numbers on crafted data, checked against hand-computed values (no Great Expectations)."""

from __future__ import annotations

import pandas as pd
import pytest
from quality_rows import (
    VALID_ROWS,
    file_row,
    frame,
    query_row,
    rejected_file_row,
    rejection_row,
    sample_row,
    trajectory_row,
)

from datamind.categories import CATEGORY_IDS
from datamind.quality.summaries import (
    category_distribution,
    consistency_stats,
    distribution,
    drop_reasons,
    file_rejection_reasons,
    format_summary,
    hop_distribution,
    summarize,
)


def test_distribution_keeps_declared_order_and_zeros_then_others_by_count():
    got = distribution(["b", "x", "x", None, "y", "x", "y"], order=["a", "b"])
    assert list(got.items()) == [("a", 0), ("b", 1), ("x", 3), ("y", 2), ("(null)", 1)]


def test_category_distribution_lists_all_18_in_paper_order_then_unknown():
    df = pd.DataFrame({"category": ["ranking", "ranking", "aggregation", "bogus"]})
    got = category_distribution(df)
    assert list(got)[:18] == list(CATEGORY_IDS)
    assert len(CATEGORY_IDS) == 18
    assert got["aggregation"] == 1 and got["ranking"] == 2 and got["counting"] == 0
    assert list(got)[18:] == ["bogus"] and got["bogus"] == 1
    assert sum(got.values()) == 4


def test_hop_distribution_from_arrow_int8_column():
    df = frame(
        "queries",
        [
            query_row(1),
            query_row(2, hop=3, parent_query_ids=["q1"], root_query_id="q1"),
            query_row(3, hop=3, parent_query_ids=["q1"], root_query_id="q1"),
        ],
    )
    assert hop_distribution(df) == {"1": 1, "2": 0, "3": 2, "4": 0, "5": 0}


def test_consistency_and_rescue_hand_computed():
    # q1, q2, q4 consistent at round 0 (q4 also kept a round-1 trajectory), q3 and q5 rescued by
    # reflection, q6 judged but never kept.
    judged = ["q1", "q1", "q1", "q2", "q3", "q4", "q5", "q6"]
    kept = pd.DataFrame(
        {
            "query_id": ["q1", "q1", "q2", "q3", "q4", "q4", "q5"],
            "reflection_round": [0, 0, 0, 1, 1, 0, 2],
        }
    )
    s = consistency_stats(judged, kept)
    assert (s.n_judged, s.n_first_pass, s.n_rescued, s.n_failed) == (6, 3, 2, 1)
    assert s.consistency_rate == pytest.approx(3 / 6)
    assert s.rescue_yield == pytest.approx(2 / 3)
    assert s.pass_rate == pytest.approx(5 / 6)


def test_consistency_counts_kept_queries_missing_from_judged_and_handles_empty():
    s = consistency_stats(["q1"], pd.DataFrame({"query_id": ["q2"], "reflection_round": [None]}))
    assert (s.n_judged, s.n_first_pass, s.n_failed) == (2, 1, 1)
    empty = consistency_stats([], pd.DataFrame({"query_id": [], "reflection_round": []}))
    assert empty.consistency_rate is None and empty.rescue_yield is None
    all_first = consistency_stats(["a"], pd.DataFrame({"query_id": ["a"], "reflection_round": [0]}))
    assert all_first.consistency_rate == 1.0 and all_first.rescue_yield is None  # nothing needed rescue


def test_drop_reasons_sorted_by_count_then_name():
    rej = frame(
        "rejections",
        [
            rejection_row(1, "synth", "parse_error"),
            rejection_row(2, "synth", "parse_error"),
            rejection_row(3, "judge", "inconsistent"),
            rejection_row(4, "judge", "inconsistent"),
            rejection_row(5, "judge", "inconsistent"),
            rejection_row(6, "synth", "duplicate"),
        ],
    )
    assert drop_reasons(rej) == [
        {"stage": "judge", "reason_code": "inconsistent", "count": 3},
        {"stage": "synth", "reason_code": "parse_error", "count": 2},
        {"stage": "synth", "reason_code": "duplicate", "count": 1},
    ]
    assert drop_reasons(rej, stage="synth") == [
        {"stage": "synth", "reason_code": "parse_error", "count": 2},
        {"stage": "synth", "reason_code": "duplicate", "count": 1},
    ]
    assert drop_reasons(rej.iloc[0:0]) == []


def test_file_rejection_reasons_come_from_the_catalog_itself():
    df = frame(
        "catalog_files",
        [
            file_row(1),
            rejected_file_row(2, "too_small"),
            rejected_file_row(3, "too_small"),
            rejected_file_row(4, "unreadable"),
        ],
    )
    assert file_rejection_reasons(df) == [
        {"stage": "ingest", "reason_code": "too_small", "count": 2},
        {"stage": "ingest", "reason_code": "unreadable", "count": 1},
    ]
    s = summarize("catalog_files", df)
    assert s["by_status"] == {"accepted": 1, "rejected": 3}
    assert s["accepted_rows"] == 50 and s["accepted_tables"] == 1


def test_dataset_summary_with_trajectories_gives_consistency_and_log_lines():
    traj = frame(
        "trajectories", [trajectory_row(i, query_id=q, sample_index=i) for i, q in enumerate(["q1", "q2", "q3", "q4"])]
    )
    ds = frame(
        "dataset",
        [
            sample_row(1, query_id="q1", model="offline-expert", question_model="offline"),
            sample_row(
                2, query_id="q2", reflection_round=1, category="counting", hop=1, model="qwen", question_model="qwen"
            ),
        ],
    )
    rej = frame("rejections", [rejection_row(1, "judge", "inconsistent")])
    s = summarize("dataset", ds, {"trajectories": traj, "rejections": rej})
    # 4 judged: q1 first pass, q2 rescued, q3 and q4 failed -> 1/4 consistent, 1 of 3 rescued.
    assert s["consistency"]["consistency_rate"] == pytest.approx(0.25)
    assert s["consistency"]["rescue_yield"] == pytest.approx(1 / 3)
    assert s["by_hop"] == {"1": 1, "2": 1, "3": 0, "4": 0, "5": 0}
    assert s["by_category"]["ranking"] == 1 and s["by_category"]["counting"] == 1
    assert s["drop_reasons"] == [{"stage": "judge", "reason_code": "inconsistent", "count": 1}]
    text = "\n".join(format_summary(s))
    assert "consistency rate: 25.0% (1/4" in text
    assert "rescue yield: 33.3% (1 rescued, 2 failed)" in text
    assert "drop reasons: judge/inconsistent=1" in text
    assert "hop: 1=1, 2=1; no rows for 3: 3, 4, 5" in text
    assert "category: ranking=1, counting=1; no rows for 16: aggregation, comparison, " in text
    # who wrote the samples: the trajectories' and the questions' writers
    assert s["by_model"] == {"offline-expert": 1, "qwen": 1} and s["by_question_model"] == {"offline": 1, "qwen": 1}
    assert "written by: offline-expert=1, qwen=1" in text and "question by: offline=1, qwen=1" in text


def test_trajectory_summary_void_turn_rate():
    s = summarize("trajectories", frame("trajectories", VALID_ROWS["trajectories"]()))
    # turns 2 + 3 + 2, void 0 + 1 + 0
    assert (s["n_turns"], s["n_void_turns"]) == (7, 1)
    assert s["void_turn_rate"] == pytest.approx(1 / 7)
    assert s["by_status"] == {"answered": 2, "max_turns": 1, "error": 0}
    assert s["n_queries"] == 1


def test_queries_summary_counts():
    s = summarize("queries", frame("queries", VALID_ROWS["queries"]()))
    assert s["n_rows"] == 3
    assert s["by_hop"] == {"1": 2, "2": 0, "3": 1, "4": 0, "5": 0}
    assert {k: v for k, v in s["by_category"].items() if v} == {
        "aggregation": 1,
        "comparison": 1,
        "multi_hop_numerical_reasoning": 1,
    }


@pytest.mark.parametrize("table", sorted(VALID_ROWS))
def test_empty_tables_summarize_to_zero(table):
    s = summarize(table, frame(table, []))
    assert s["n_rows"] == 0
    if "by_hop" in s:
        assert set(s["by_hop"].values()) == {0}
    format_summary(s)  # renders without dividing by zero
