"""The audit's figures for what columns and rows mean (issue 46): questions over totals counted as data, measures
used as group labels, code that writes its answer, answers known before any analysis. The catalog facts come from
small files profiled here by the real loaders."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "synth"))

from synth_fixtures import catalog_rows, census_csv, write_catalog  # noqa: E402

from datamind.agent import protocol as p  # noqa: E402
from datamind.publish import meaning  # noqa: E402
from datamind.publish.audit import THRESHOLDS, audit_rows  # noqa: E402
from datamind.storage import DataRoot  # noqa: E402

LEAVE_OUT = (
    " Leave out the aggregate rows whose Geographic Area is 'United States', 'Northeast', 'Midwest', 'South' or "
    "'West': they total other rows."
)


def _tables(tmp_path: Path) -> list[dict]:
    census = census_csv(tmp_path / "census.csv")
    votes = tmp_path / "votes.csv"
    votes.write_text(
        "station,district,Libertarische Partij (LP),turnout\n"
        + "".join(f"s{i},{['Noord', 'Zuid'][i % 2]},{i % 4},{0.5 + i % 7 / 20}\n" for i in range(40))
    )
    return catalog_rows(census) + catalog_rows(votes)


def _sample(i: int, table: dict, question: str, answer: str, code: str = "print(df.shape)", first: str = "") -> dict:
    return {
        "sample_id": f"s{i}",
        "file_id": table["file_id"],
        "data_format": "csv",
        "data_uri": table["staged_uri"],
        "category": "counting",
        "hop": 1,
        "question": question,
        "final_answer": answer,
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": question},
            {"role": "assistant", "content": p.format_code_turn("Look at the table.", "df = pd.read_csv('a.csv')")},
            {"role": "tool", "content": p.format_interpreter(first or f"shape: ({table['n_rows']}, 3)")},
            {"role": "assistant", "content": p.format_code_turn("Compute it.", code)},
            {"role": "tool", "content": p.format_interpreter(answer)},
            {"role": "assistant", "content": p.format_answer_turn("So.", answer)},
        ],
    }


def test_the_audit_counts_questions_that_misread_what_rows_and_columns_mean(tmp_path):
    census, votes = _tables(tmp_path)
    context = meaning.context_of([census, votes])
    assert context.files[census["file_id"]][0].aggregate_labels == (
        "United States",
        "Northeast",
        "Midwest",
        "South",
        "West",
    )
    assert context.files[votes["file_id"]][0].measures == frozenset({"Libertarische Partij (LP)", "turnout"})
    lp = "Libertarische Partij (LP)"
    rows = [
        # the country counted as a state: flagged; the same question leaving the totals out is not
        _sample(0, census, "Which Geographic Area has the highest pop2019?", "United States"),
        _sample(1, census, "Which Geographic Area has the highest pop2019?" + LEAVE_OUT, "California"),
        # a vote count as a group label: flagged; a district as one, or the count averaged, is not
        _sample(
            2,
            votes,
            f"Is it true that records with {lp} 1 have a higher average turnout than records with "
            f"{lp} 0? Answer Yes or No.",
            "Yes",
        ),  # fmt: skip
        _sample(3, votes, "Which district has the highest average turnout?", "Noord"),
        _sample(4, votes, f"What is the average {lp} across all records?", "1.5"),
        # code that writes its answer
        _sample(
            5,
            votes,
            "How many rows and columns, and which column has the most blanks?",
            "40 rows, 4 columns, none",
            code="print(f'{df.shape[0]} rows, {df.shape[1]} columns, none')",
        ),  # fmt: skip
        # answers known before the analysis: an outlier count "more than half" (never), a count the question states,
        # a count the first look printed
        _sample(
            6,
            votes,
            "First, count the turnout outliers more than two standard deviations from the mean. Is "
            "that number of outliers more than half of all records?",
            "No",
        ),  # fmt: skip
        _sample(7, votes, f"How many records have {lp} equal to 3?", "3"),
        _sample(8, votes, "After removing exact duplicate rows, how many records remain?", "40"),
        _sample(9, votes, "How many records have a turnout above 0.6?", "23"),
    ]
    figures = audit_rows(rows, context=context)
    assert figures["aggregate_row_question_share"] == 0.1  # sample 0
    assert figures["measure_category_share"] == 0.2  # samples 2 and 7
    assert figures["literal_answer_share"] == 0.1  # sample 5
    assert figures["fixed_answer_share"] == 0.3  # samples 6, 7 and 8
    assert figures["examples"]["aggregate_row_question_share"] == ["s0"]
    assert figures["examples"]["fixed_answer_share"] == ["s6", "s7", "s8"]
    missed = {m.split(" =")[0] for m in figures["misses"]}
    assert missed >= {"aggregate_row_question_share", "measure_category_share", "literal_answer_share",
                      "fixed_answer_share"}  # fmt: skip
    assert all(
        THRESHOLDS[name][:2] == ("<=", 0.0) for name in missed if name.endswith(("question_share", "answer_share"))
    )
    # without the catalog's facts the two figures that need them count nothing
    assert audit_rows(rows)["aggregate_row_question_share"] == 0.0


def test_the_release_reads_the_facts_from_its_catalog(tmp_path):
    root = DataRoot(str(tmp_path / "data"))
    tables = _tables(tmp_path)
    write_catalog(root, tables)
    context = meaning.load_context(root)
    assert {fid: [t.name for t in ts] for fid, ts in context.files.items()} == {
        t["file_id"]: [t["table_name"]] for t in tables
    }
    assert meaning.load_context(DataRoot(str(tmp_path / "empty"))).files == {}
