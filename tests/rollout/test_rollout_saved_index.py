"""A CSV saved with its DataFrame index has a leading 'Unnamed: 0' column: that is data, not a header
problem, so the expert does not 're-read' it and the audit does not count it as an unfixed header."""

from __future__ import annotations

from datamind.agent.policies.narration import ReadView, read_problem
from datamind.publish.audit import sample_figures


def _view(names):
    return ReadView((10, len(names)), tuple((n, "int64") for n in names), None)


def test_a_saved_index_column_is_not_a_header_problem():
    assert read_problem(_view(["Unnamed: 0", "temp", "city"])) is None
    assert "no name" in read_problem(_view(["id", "Unnamed: 1", "city"]))
    assert "title" in read_problem(_view(["Report", "Unnamed: 1", "Unnamed: 2"]))


def _sample(obs: str, later_code: str = "print(1)") -> dict:
    return {
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "<think>t</think><code>df = pd.read_csv('a.csv')</code>"},
            {"role": "tool", "content": f"<interpreter>\n{obs}\n</interpreter>"},
            {"role": "assistant", "content": f"<think>u</think><code>{later_code}</code>"},
            {"role": "tool", "content": "<interpreter>\n1\n</interpreter>"},
            {"role": "assistant", "content": "<think>v</think><answer>1</answer>"},
        ]
    }


def test_the_audit_counts_placeholder_headers_but_not_a_saved_index():
    index_only = "Unnamed: 0    int64\ntemp  float64\n   Unnamed: 0  temp\n0  0  1.5"
    assert not sample_figures(_sample(index_only)).unfixed_placeholder
    title_rows = "Report   str\nUnnamed: 1   str\nUnnamed: 2  str"
    assert sample_figures(_sample(title_rows)).unfixed_placeholder
    assert not sample_figures(_sample(title_rows, "df = pd.read_csv('a.csv', skiprows=2)")).unfixed_placeholder


def test_a_trailing_delimiter_is_named_for_what_it_is():
    problem = read_problem(_view(["JDTDB", "X", "Y", "Unnamed: 3"]))
    assert "last column 'Unnamed: 3'" in problem and "delimiter" in problem and "header" not in problem
    drop = "df = df.loc[:, [c for c in df.columns if not (str(c).startswith('Unnamed: ') and df[c].isna().all())]]"
    assert not sample_figures(_sample("X  float64\nUnnamed: 3  float64", drop)).unfixed_placeholder
