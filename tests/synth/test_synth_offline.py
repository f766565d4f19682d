"""Offline engine on small tables whose answers are worked out by hand."""

from __future__ import annotations

import csv
import datetime as dt
import re
import sqlite3
from itertools import pairwise
from pathlib import Path

import pytest
from synth_fixtures import catalog_rows

from datamind.categories import CATEGORY_IDS
from datamind.phrasing import without_format
from datamind.synth.dedup import jaccard, near_duplicates, shingles
from datamind.synth.offline.compose import build_chains
from datamind.synth.offline.engine import synthesize_offline
from datamind.synth.offline.execute import run_in_subprocess
from datamind.synth.params import SynthParams
from datamind.synth.table import dedup_rows, load_view, replay_chain, synthesize_table_offline


def _all_candidates(root, path, per_category=25):
    (row,) = catalog_rows(path)
    source, view = load_view(root, row)
    result = synthesize_offline(view, source, CATEGORY_IDS, per_category, seed=0, table_key=row["table_id"])
    # keyed by the template wording, without the answer-format sentence every question ends with
    by_q = {without_format(c.task.question): c for cands in result.candidates.values() for c in cands}
    return row, source, view, result, by_q


def test_hand_computed_answers_on_a_small_csv(root, small_csv):
    # units: north 10,20,30 | south 5,15,25 | east 40,60 ; price = units / 5 ; 8 rows
    _, source, view, result, by_q = _all_candidates(root, small_csv)
    assert source.reader == "plain" and view.measures == ["units", "price"] and view.groups == ["region"]
    expected = {
        "What is the average units across all records?": "25.625",  # 205 / 8
        "What is the total units for records where region is 'north'?": "60.0",
        "Which region has the highest average units?": "east",  # north 20, south 15, east 50
        "How many records have region equal to 'south'?": "3",
        "How many records have a units greater than the average units?": "3",  # 30, 40, 60
        "How many distinct region values appear in the data?": "3",
        "What is the median units?": "22.5",  # (20 + 25) / 2
        "What is the Pearson correlation coefficient between units and price?": "1.0",
        "What is the difference between the largest and the smallest units?": "55.0",
        "Which year has the most records according to day?": "2024",
        "How many days lie between the earliest and the latest day?": str(
            (dt.date(2024, 6, 10) - dt.date(2023, 1, 5)).days
        ),
        "What percentage of the total units is contributed by records with region 'north'?": str(
            round(60 / 205 * 100, 2)
        ),
    }
    for question, answer in expected.items():
        assert question in by_q, f"missing: {question}"
        assert by_q[question].answer == answer, question
    assert all(c.lang == "python" for c in by_q.values())
    # price is a value per unit: averaged and compared, never totalled, and no ratio of its total
    assert view.roles["price"] == "nonadditive_measure" and view.additive == ["units"]
    assert not [q for q in by_q if re.search(r"total price|sum of price", q)]


def test_every_category_is_covered_when_the_table_supports_it(root, small_csv):
    _, _, _, result, _ = _all_candidates(root, small_csv, per_category=1)
    assert {c for c, cands in result.candidates.items() if cands} == set(CATEGORY_IDS)
    assert result.skips == []


def test_categories_a_table_cannot_support_are_skipped_with_a_reason(root, tmp_path):
    path = tmp_path / "names.csv"
    path.write_text("name,comment\n" + "".join(f"person{i},said thing number {i}\n" for i in range(30)))
    _, _, view, result, _ = _all_candidates(root, path, per_category=2)
    assert view.measures == [] and view.groups == [] and view.dates == []
    skipped = {s.category: s for s in result.skips}
    for category in ("correlation_analysis", "aggregation", "time_based_calculation", "distribution_analysis"):
        assert skipped[category].reason_code == "unsupported_table"
        assert skipped[category].reason.startswith("needs ")
        assert result.candidates[category] == []
    # cleaning that removes nothing (no duplicates, no blanks) would answer with the row count the first look at
    # the data prints: not asked (issue 46)
    assert result.candidates["comprehensive_data_preprocessing"] == []
    assert skipped["comprehensive_data_preprocessing"].reason_code == "unsupported_table"


def test_sqlite_questions_use_sql_joined_along_the_foreign_key(root, small_sqlite):
    rows = {r["table_name"]: r for r in catalog_rows(small_sqlite)}
    source, view = load_view(root, rows["sales"])
    assert [(j.fk_column, j.parent_table, j.label_column) for j in source.joins] == [("shop_id", "shops", "shop_name")]
    assert "shop_id" not in view.measures and "sale_id" not in view.measures  # keys are not quantities
    result = synthesize_offline(view, source, ("ranking", "counting", "statistical_analysis"), 10, 0, "t")
    by_q = {without_format(c.task.question): c for cands in result.candidates.values() for c in cands}
    # the parent's column goes by its schema name, Parent.Column: no alias of ours reaches a question
    top = by_q["Which shops.shop_name has the highest average amount?"]  # Alpha 25, Beta 7, Gamma 50.33
    assert top.lang == "sql" and top.answer == "Gamma"
    assert 'LEFT JOIN "shops"' in top.solution and top.solution.lstrip().upper().startswith("WITH R AS")
    assert top.solution.upper().count("SELECT") == 2  # the relation once, then one short statement
    # ...and the relation selects what the statement uses, not every column of the table
    assert "t.*" not in top.solution and 't."amount"' in top.solution and 't."qty"' not in top.solution
    assert by_q["How many records have shops.shop_name equal to 'Beta'?"].answer == "3"  # 5, 7, 9
    # a question that names no parent column joins nothing
    assert "JOIN" not in by_q["What is the median amount?"].solution
    # no plain-SQL form for a median: a pandas program over the same joined relation
    median = by_q["What is the median amount?"]
    # ...which reads the database only through the SQL session's execute_sql tool, as an agent must
    assert median.lang == "python" and "execute_sql(" in median.solution and "sqlite3" not in median.solution
    assert median.answer == "15.0"


def test_stored_programs_run_on_their_own_in_a_fresh_interpreter(root, small_csv, small_sqlite):
    jobs, expected = [], []
    for path in (small_csv, small_sqlite):
        for row in catalog_rows(path):
            source, view = load_view(root, row)
            result = synthesize_offline(view, source, CATEGORY_IDS, 2, 0, row["table_id"])
            for cands in result.candidates.values():
                for c in cands:
                    jobs.append({"lang": c.lang, "solution": c.solution, "db_path": source.data_path})
                    expected.append(c.answer)
    results = run_in_subprocess(jobs, timeout_s=120)
    assert len(results) == len(jobs) > 40
    assert [r.get("answer", r.get("error")) for r in results] == expected


def test_chains_feed_each_result_into_the_next_hop(root, small_csv):
    (row,) = catalog_rows(small_csv)
    source, view = load_view(root, row)
    chains = build_chains(view, source, n_chains=3, min_hops=4, max_hops=4, seed=0, table_key="t")
    assert len(chains) == 3
    for chain in chains:
        assert len(chain) == 4
        for prev, hop in pairwise(chain):
            literal = repr(prev.value.value)
            body = hop.solution.split("DATA_PATH", 1)[-1]
            assert literal in body or f"'{prev.value.value}'" in body, (literal, hop.solution)
            # the harder question describes the previous result instead of stating it
            assert prev.answer not in hop.task.question or prev.answer in prev.task.question


SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def test_composition_spans_the_taxonomy_and_reads_as_one_question(root):
    """Hops 2-5 draw on at least 12 of the 18 categories, and each composed question restates the steps
    that produce its input in order (so it stands alone), then asks about that value."""
    from datamind.phrasing import final_ask

    categories, n_hops = set(), 0
    for path in (SAMPLES / "files" / "sales_orders.csv", SAMPLES / "bird" / "retail_shop" / "retail_shop.sqlite"):
        for row in catalog_rows(path, max_rows=10**6):
            source, view = load_view(root, row)
            for chain in build_chains(view, source, 10, 2, 5, 0, row["table_id"]):
                for k, hop in enumerate(chain, start=1):
                    q = hop.task.question
                    if k == 1:
                        assert final_ask(q) == q
                        continue
                    n_hops += 1
                    categories.add(hop.task.category)
                    ask = final_ask(q)
                    restated = q[: -len(ask)]
                    # one restated step per earlier hop, in the order the hops ran
                    assert restated.count(". ") + restated.endswith(".") >= k - 1, q
                    assert not re.search(r"\b(Then|Next|After that)\b[^.]*\. \1\b", q), q
                    assert hop.answer not in restated or hop.answer in chain[0].task.question
    assert n_hops >= 30
    assert len(categories) >= 12, sorted(categories)


def test_chain_rows_keep_lineage_and_replay_to_the_stored_answers(root, small_sqlite):
    rows = {r["table_name"]: r for r in catalog_rows(small_sqlite)}
    params = SynthParams(queries_per_category=0, n_chains=2, min_hops=2, max_hops=5, seed=3)
    out = synthesize_table_offline(root, rows["sales"], params, run_id="r")
    assert out.chain_rows
    for chain in out.chain_rows:
        assert 2 <= len(chain) <= 5
        assert [r["hop"] for r in chain] == list(range(1, len(chain) + 1))
        assert chain[0]["parent_query_ids"] == [] and chain[0]["root_query_id"] == chain[0]["query_id"]
        for prev, row in pairwise(chain):
            assert row["parent_query_ids"] == [prev["query_id"]]
            assert row["root_query_id"] == chain[0]["query_id"]
        assert replay_chain(chain, str(small_sqlite)) == [r["reference_answer"] for r in chain]


def test_same_inputs_give_the_same_questions_and_ids(root, small_csv):
    (row,) = catalog_rows(small_csv)
    params = SynthParams(queries_per_category=2, n_chains=2)
    a = synthesize_table_offline(root, row, params, run_id="r1")
    b = synthesize_table_offline(root, row, params, run_id="r2")
    assert [r["query_id"] for r in a.rows] == [r["query_id"] for r in b.rows]
    c = synthesize_table_offline(root, row, SynthParams(queries_per_category=2, n_chains=2, seed=7), run_id="r1")
    assert {r["query_id"] for r in a.rows}.isdisjoint({r["query_id"] for r in c.rows})


def test_near_duplicates_are_dropped_but_distinct_questions_kept():
    a = "What is the average price across all records?"
    assert jaccard(shingles(a), shingles("what is the AVERAGE price, across all records")) == 1.0
    items = [
        a,
        "What is the average price across all records ?",
        "What is the average weight across all records?",
        "How many records have a price above 3?",
    ]
    kept, dropped = near_duplicates(items, str, threshold=0.8)
    assert kept == [items[0], items[2], items[3]]
    assert dropped[0][0] == items[1] and dropped[0][1] == items[0] and dropped[0][2] == pytest.approx(1.0)
    kept, dropped = near_duplicates(items, str, threshold=0.8, protected=lambda q: q == items[1])
    assert kept == items and dropped == []


def test_dedup_rows_records_each_drop_and_never_breaks_a_chain():
    def row(qid, question, hop=1, parents=()):
        return {"query_id": qid, "question": question, "hop": hop, "parent_query_ids": list(parents), "file_id": "f"}

    rows = [
        row("a", "What is the average price?"),
        row("b", "what is the average price"),
        row("c", "What is the average price ?", 1),
        row("d", "Next step on it?", 2, ["c"]),
        row("a", "What is the average price?"),
    ]
    kept, rejections = dedup_rows(rows, 0.8, "fp", "run")
    assert [r["query_id"] for r in kept] == ["a", "c", "d"]  # c is a parent: kept although a near-duplicate
    assert [r["query_id"] for r in rejections] == ["b"]
    assert rejections[0]["reason_code"] == "near_duplicate" and re.search(r"query a\b", rejections[0]["reason"])


HOSTILE = "__import__('os').system('touch PWNED')"


def test_hostile_column_names_and_values_cannot_change_what_programs_do(root, tmp_path, monkeypatch):
    """Names and cells with quotes, braces, backslashes and code stay data: programs run and nothing executes."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "hostile.csv"
    cols = ['it\'s "price"', "grp{0}", "back\\slash", "qty"]
    groups = ["O'Brien", '"quoted"', HOSTILE, "{}"]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for i in range(28):  # the code-like value is the most frequent group, so questions pick it
            w.writerow([1.5 * i + (i % 5), groups[i % 4] if i < 24 else HOSTILE, f"v{i % 3}\\", i * i % 17])
    db = tmp_path / "hostile.sqlite"
    con = sqlite3.connect(db)
    con.execute('CREATE TABLE "we""ird" ("a\'b" TEXT, "x ""y""" REAL)')
    con.executemany('INSERT INTO "we""ird" VALUES (?, ?)', [(groups[i % 4], float(i * 3 % 11)) for i in range(24)])
    con.commit()
    con.close()

    jobs, expected = [], []
    for p in (path, db):
        for row in catalog_rows(p):
            source, view = load_view(root, row)
            assert view.groups, "the hostile group column must still be usable"
            result = synthesize_offline(view, source, CATEGORY_IDS, 3, 0, row["table_id"])
            for cands in result.candidates.values():
                for c in cands:
                    jobs.append({"lang": c.lang, "solution": c.solution, "db_path": source.data_path})
                    expected.append(c.answer)
            assert not [e for _, e in result.failures if "SyntaxError" in e]
    assert len(jobs) > 40 and any(HOSTILE in j["solution"] for j in jobs)
    assert [r.get("answer", r.get("error")) for r in run_in_subprocess(jobs)] == expected
    assert not (tmp_path / "PWNED").exists() and not Path("PWNED").exists()


def test_a_template_that_crashes_on_odd_data_is_reported_and_the_others_carry_on(root, small_csv, monkeypatch):
    from datamind.synth.offline import generators

    def broken(view, rng):
        raise ZeroDivisionError("odd data")
        yield  # pragma: no cover - makes this a generator

    monkeypatch.setitem(generators.REGISTRY, "counting", [broken, *generators.REGISTRY["counting"]])
    (row,) = catalog_rows(small_csv)
    source, view = load_view(root, row)
    result = synthesize_offline(view, source, ("counting",), 3, 0, "t")
    assert len(result.candidates["counting"]) == 3
    assert [(t.template, e) for t, e in result.failures] == [("broken", "template error: ZeroDivisionError: odd data")]


def test_an_unexpected_failure_on_one_table_becomes_a_rejection(root, small_csv, monkeypatch):
    import datamind.synth.table as table_mod

    monkeypatch.setattr(table_mod, "build_view", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    (row,) = catalog_rows(small_csv)
    out = synthesize_table_offline(root, row, SynthParams(), run_id="r")
    assert out.rows == [] and [r["reason_code"] for r in out.rejections] == ["synthesis_error"]
    assert "RuntimeError: boom" in out.rejections[0]["reason"] and out.rejections[0]["file_id"] == row["file_id"]


def test_every_category_has_several_registered_templates():
    from datamind.synth.offline.generators import REGISTRY

    assert set(REGISTRY) == set(CATEGORY_IDS)
    assert all(len(REGISTRY[c]) >= 2 for c in CATEGORY_IDS)
    names = [fn.__name__ for fns in REGISTRY.values() for fn in fns]
    assert len(names) == len(set(names))  # template names are stored in template_version: unique


def test_questions_carry_the_units_the_column_descriptions_give():
    from datamind.phrasing import glossary, polish_question

    profiles = [
        {"name": "total", "description": "amount charged in euros | Values: quantity times list price"},
        {"name": "customer_id", "description": "customer id | unique identifier of the customer"},
        {"name": "wait", "description": "waiting time in days"},
        {"name": "note", "description": None},
    ]
    terms = glossary(profiles)
    assert terms == {"total": "amount charged in euros", "wait": "waiting time in days"}  # only units and scales
    q = polish_question("What is the average total across all records?", "12.5", terms)
    assert q.startswith("What is the average total across all records? (total: amount charged in euros.)")
    assert polish_question("How many customer_id values are there?", "3", terms).count("(") == 0
    # a column name inside another word is not a mention
    assert "(" not in polish_question("What is the subtotal?", "1", terms)


def test_integer_columns_that_count_things_are_measures_never_groups():
    """A small integer column groups when it is a code (class, rating) and not when its name says it counts
    something: "the Stores with the highest average revenue" is not a question an analyst asks."""
    import pandas as pd

    from datamind.synth.offline.columns import build_view

    n = 40
    df = pd.DataFrame(
        {
            "Region": ["North", "South", "East", "West"] * (n // 4),
            "Stores": [2, 3, 4, 5] * (n // 4),
            "NumberOfDays": [1, 2, 3, 4, 5, 6, 7, 8] * (n // 8),
            "Pclass": [1, 2, 3, 1, 2] * (n // 5),
            "status": [0, 1] * (n // 2),
            "rating": [1, 2, 3, 4, 5] * (n // 5),
            "Revenue": [float(i * 37 % 101) for i in range(n)],
        }
    )
    view = build_view(df)
    assert set(view.groups) == {"Region", "Pclass", "status", "rating"}
    assert "NumberOfDays" in view.measures and "Revenue" in view.measures and "Stores" not in view.groups


def test_threshold_checks_are_recognised_in_both_languages_and_nothing_that_reads_data_is(root):
    """``threshold_check`` finds exactly the hops that compare the previous result with a fixed number (the
    rollout answers those in words), in pandas and in SQL programs, and the numbers it reads back give the
    answer the hop's program printed. Checks that read the data (against a median, half the rows) are not it."""
    from datamind.references import threshold_check

    fixed = {"chain_fact_diff", "chain_fact_pct", "chain_fact_ratio", "chain_fact_corr", "chain_fact_days"}
    seen_langs, others = set(), 0
    for path in (SAMPLES / "files" / "sales_orders.csv", SAMPLES / "bird" / "retail_shop" / "retail_shop.sqlite"):
        for row in catalog_rows(path, max_rows=10**6):
            source, view = load_view(root, row)
            for chain in build_chains(view, source, 20, 2, 5, 0, row["table_id"]):
                for prev, hop in pairwise(chain):
                    found = threshold_check(hop.solution)
                    if hop.task.template not in fixed:
                        assert found is None, hop.solution
                        others += hop.task.category == "fact_checking"
                        continue
                    assert found is not None, hop.solution
                    value, threshold = found
                    assert value == float(prev.answer)
                    assert hop.answer == ("Yes" if value > threshold else "No")
                    seen_langs.add(hop.lang)
    assert seen_langs == {"python", "sql"} and others


def test_no_hop_of_a_chain_runs_an_earlier_hops_program_again(root, tmp_path):
    """With two group columns a mode of a mode comes back to where it started (the most common city of the
    segment most common in Turin is Turin): the next step would be the second hop's query once more, which
    asks nothing new, so the chain takes another step instead."""
    path = tmp_path / "customers.csv"
    lines = ["city,segment,spend"]
    for i in range(60):
        city = "Turin" if i % 2 == 0 else ["Milan", "Rome", "Oslo"][i % 3]
        segment = "business" if city == "Turin" or i % 5 == 0 else ["retail", "public"][i % 2]
        lines.append(f"{city},{segment},{10 + (i * 7) % 50}")
    path.write_text("\n".join(lines) + "\n")
    (row,) = catalog_rows(path)
    source, view = load_view(root, row)
    chains = [chain for seed in range(6) for chain in build_chains(view, source, 20, 5, 5, seed, "t")]
    assert len(chains) >= 100
    for chain in chains:
        programs = [hop.solution for hop in chain]
        assert len(set(programs)) == len(programs), [hop.task.question for hop in chain]


def test_a_value_that_reads_yes_is_asked_for_as_a_value_not_as_a_verdict(root, tmp_path):
    """A ranking over a Yes/No column answers "Yes" (its most frequent value): the question must ask for the
    value, not add "Reply with yes or no." (sample 585e3824f9a0: "Which remote appears most often? Reply with
    yes or no."). A yes/no form is stated exactly where the program decides a claim."""
    from datamind.phrasing import _FORMATS

    path = tmp_path / "staff.csv"
    rows = [("north", "Yes", 52000 + 900 * i) for i in range(9)] + [("south", "No", 48000 + 700 * i) for i in range(5)]
    rows += [("east", "Yes", 61000 + 500 * i) for i in range(6)]
    path.write_text("team,remote,salary\n" + "".join(f"{t},{r},{s}\n" for t, r, s in rows))
    (row,) = catalog_rows(path)
    out = synthesize_table_offline(root, row, SynthParams(queries_per_category=20, n_chains=6), run_id="r")
    questions = out.rows + [r for chain in out.chain_rows for r in chain]
    verdict_forms = _FORMATS["yesno"]
    asked_for_value = [r for r in questions if r["reference_answer"] in ("Yes", "No") and "'Yes'" not in
                       r["reference_solution"]]  # fmt: skip
    assert asked_for_value, "no question over the remote column's values: the test's table no longer exercises it"
    for r in questions:
        if any(r["question"].endswith(f) for f in verdict_forms):  # a verdict is asked for: the program decides one
            assert "'Yes' if" in r["reference_solution"] or "THEN 'Yes' ELSE 'No'" in r["reference_solution"]
    for r in asked_for_value:
        assert not any(r["question"].endswith(f) for f in verdict_forms), r["question"]


QTY = [2, 5, 3, 5, 8, 6, 4]


def _events_db(tmp_path: Path) -> Path:
    path = tmp_path / "events.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, day TEXT, city TEXT, amount INTEGER, qty INTEGER)")
    days = ["2022-03-10", "2022-11-02", "2023-03-05", "2023-03-20", "2023-07-01", "2023-03-28", "2024-01-15"]
    rows = [(i, d, ["Oslo", "Rome"][i % 2], 7 + 3 * i, QTY[i]) for i, d in enumerate(days)]
    con.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    return path


def test_date_and_ratio_questions_on_a_database_are_answered_in_sql(root, tmp_path):
    """Where SQLite computes a question plainly (the year or month with most records, the month with the largest
    total, the change of the yearly mean and the span of days of ISO dates, the mean of a per-row ratio), a
    database's reference is that one SQL statement, as an analyst writes it,
    not rows fetched into pandas; its answer is the one worked out by hand (integer columns divide as reals)."""
    (row,) = catalog_rows(_events_db(tmp_path))
    source, view = load_view(root, row)
    result = synthesize_offline(view, source, ("time_based_calculation", "feature_engineering"), 20, 0, "t")
    by_template = {c.task.template: c for cands in result.candidates.values() for c in cands}
    ratio = sum((7 + 3 * i) / QTY[i] for i in range(7)) / 7
    expected = {
        "time_busiest_year": "2023",  # 4 of the 7 days
        "fe_month": "3",  # March: 2022-03-10, 2023-03-05, 2023-03-20, 2023-03-28
        "time_span_days": str((dt.date(2024, 1, 15) - dt.date(2022, 3, 10)).days),
        "fe_ratio": str(round(ratio, 4)),
        "time_best_month": "2023-03",  # amount 13 + 16 + 22, qty 3 + 5 + 6: March 2023 either way
        # the mean of 2024 (one day) against the mean of 2022 (two days), in percent
        "time_growth": {"amount": str(round((25 - (7 + 10) / 2) / ((7 + 10) / 2) * 100, 2)),
                        "qty": str(round((4 - (2 + 5) / 2) / ((2 + 5) / 2) * 100, 2))},
    }  # fmt: skip
    ratio_reverse = str(round(sum(QTY[i] / (7 + 3 * i) for i in range(7)) / 7, 4))
    for template, answer in expected.items():
        cand = by_template[template]
        assert cand.lang == "sql" and "execute_sql" not in cand.solution, template
        if template == "fe_ratio" and cand.task.params["a"] == "qty":
            answer = ratio_reverse
        if isinstance(answer, dict):
            answer = answer[cand.task.params["m"]]
        if template == "time_best_month":
            assert cand.answer == answer, cand.solution
            continue
        assert float(cand.answer) == pytest.approx(float(answer)), (template, cand.solution)


def test_dates_sqlite_cannot_read_keep_the_pandas_program(root, tmp_path):
    """Dates written 10/03/2022 are no input for SQLite's date functions: those questions keep pandas."""
    path = tmp_path / "events.csv"
    days = ["10/03/2022", "02/11/2022", "05/03/2023", "20/03/2023", "01/07/2023", "28/03/2023", "15/01/2024"]
    path.write_text("day,amount\n" + "".join(f"{d},{7 + 3 * i}\n" for i, d in enumerate(days)))
    (row,) = catalog_rows(path)
    source, view = load_view(root, row)
    result = synthesize_offline(view, source, ("time_based_calculation", "feature_engineering"), 20, 0, "t")
    tasks = [c.task for cands in result.candidates.values() for c in cands]
    kinds = ("time_busiest_year", "fe_month", "time_span_days", "time_best_month", "time_growth")
    dated = [t for t in tasks if t.template in kinds]
    assert {"time_best_month", "time_growth"} <= {t.template for t in dated} and all(t.sql is None for t in dated)


def test_a_question_that_asks_for_several_steps_counts_them_in_its_hop(root, small_csv):
    """'First find the group with the largest total, then average inside it' is two hops of reasoning in one
    question: its hop label says so (the read found multi-hop questions labelled hop 1), and it stands alone."""
    (row,) = catalog_rows(small_csv)
    out = synthesize_table_offline(root, row, SynthParams(queries_per_category=5, n_chains=0), run_id="r")
    multi = [r for r in out.rows if r["category"] == "multi_hop_numerical_reasoning"]
    assert multi
    for r in multi:
        steps = {"mh_top_group_mean": 2, "mh_share_above_group_mean": 3}[r["template_version"].rsplit("/", 1)[1]]
        assert r["hop"] == steps and not r["parent_query_ids"] and r["root_query_id"] == r["query_id"]
    assert all(r["hop"] == 1 for r in out.rows if r["category"] != "multi_hop_numerical_reasoning")


# What SQLite has no aggregate for, and an analyst therefore computes in pandas after fetching the columns: medians
# and quantiles (quartile bins, Tukey fences), standard deviations (z-scores, coefficients of variation; SQLite has
# no STDEV, and its SQRT only where it was built with the math functions), skewness, correlation and regression,
# tests of distributions, one-hot encoding, a count of gaps over every column, period-over-period changes.
_SQLITE_LACKS = re.compile(
    r"\.(?:median|quantile|std|skew|corr)\(|nanmedian|qcut|polyfit|linregress|shapiro|mannwhitneyu|get_dummies|"
    r"\.isna\(\)\.sum\(\)|pct_change"
)


def test_a_database_question_computes_in_pandas_only_what_sqlite_lacks(root, tmp_path):
    """Counts, sums, means, extremes, groups, filters and rankings over a database are SQL, in every template and
    every composed step; a question answered in pandas there needs a statistic SQLite has no aggregate for."""
    import random
    import shutil

    import pandas as pd

    from datamind.synth.offline import steps as S
    from datamind.synth.offline.columns import build_view

    repo = Path(__file__).resolve().parents[2]
    checked = 0
    for db in (repo / "samples/bird/world_atlas/world_atlas.sqlite", _events_db(tmp_path)):
        if db.parent != tmp_path:
            db = Path(shutil.copy(db, tmp_path / db.name))
        for row in catalog_rows(db):
            source, view = load_view(root, row)
            result = synthesize_offline(view, source, CATEGORY_IDS, 30, 0, "t")
            for cand in (c for cands in result.candidates.values() for c in cands):
                checked += 1
                assert cand.lang == "sql" or _SQLITE_LACKS.search(cand.task.py), (cand.task.template, cand.task.py)
    assert checked >= 100
    frame = pd.DataFrame({
        "city": ["Oslo", "Rome", "Oslo", "Rome", "Pisa"] * 8, "kind": ["a", "a", "b"] * 13 + ["a"],
        "amount": [float(7 + 3 * i % 11) for i in range(40)], "qty": [float(i % 7 + 1) for i in range(40)],
        "day": [f"2023-0{1 + i % 9}-1{i % 10}" for i in range(40)],
    })  # fmt: skip
    view = build_view(frame)
    previous = {
        "group": ("city", "Oslo"), "level": ("amount", 9.0), "spread": ("amount", 2.0), "count": (None, 12),
        "diff": ("amount", -1.5), "pct": (None, 30.0), "ratio": (None, 2.5), "corr": (None, 0.4), "days": (None, 40),
    }  # fmt: skip
    steps = [(kind, step) for kind, kinds in S.TRANSITIONS.items() if kind in previous for step in kinds]
    for kind, step in steps:
        col, value = previous[kind]
        made = step(view, S.Value(kind, value, col, "that value", ("do it",)), random.Random(0))
        assert made is not None, step.__name__
        assert made.task.sql is not None or _SQLITE_LACKS.search(made.task.py), (step.__name__, made.task.py)


def test_every_template_value_is_named_by_what_it_holds(root, tmp_path):
    """The offline expert keeps each template's result in a variable named after what the value is, on the
    bundled sales table: a mean of min-max scaled values is no median, a count above a mean no average, the
    mean inside the top group no group name, z-score outliers a count, the spread of the middle half an IQR."""
    import shutil

    from datamind.agent.policies.cells import variable_name
    from datamind.agent.policies.narration import columns_used

    repo = Path(__file__).resolve().parents[2]
    (row,) = catalog_rows(Path(shutil.copy(repo / "samples/files/sales_orders.csv", tmp_path / "sales_orders.csv")))
    source, view = load_view(root, row)
    result = synthesize_offline(view, source, CATEGORY_IDS, 30, 0, "t")
    names: dict[str, str] = {}
    for cand in (c for cands in result.candidates.values() for c in cands):
        used = columns_used(cand.task.py, list(view.df.columns))
        name = variable_name(cand.task.description, cand.solution, used, cand.answer, set())
        names.setdefault(cand.task.template, name)
        if name.startswith("median_"):
            assert "median" in cand.task.py, (cand.task.template, name)
        if name.startswith("avg_") and not name.startswith("avg_scaled_"):
            assert ".mean()" in cand.task.py, (cand.task.template, name)
    expected = {
        "prep_impute_scale": "avg_scaled_", "count_above_mean": "n_above_", "mh_top_group_mean": "avg_",
        "anom_z": "n_outliers_", "anom_iqr": "n_outliers_", "stat_iqr": "iqr_", "stat_median": "median_",
        "stat_std": "std_", "time_best_month": "top_month_", "agg_group_max": "max_", "arith_range": "range_",
        "corr_pearson": "r_", "cmp_mean_diff": "gap_", "impact_group_lift": "gap_", "fe_zscore_max": "max_z_",
    }  # fmt: skip
    assert set(expected) <= set(names), set(expected) - set(names)
    wrong = {t: names[t] for t, prefix in expected.items() if not names[t].startswith(prefix)}
    assert not wrong, wrong
