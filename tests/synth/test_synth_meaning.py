"""Questions built from what columns and rows mean, references that compute (issue 46): aggregate rows left out
and named, placeholder text counted as missing, measures never grouped by, a label shared by two keys grouped
by key, chains that never loop or divide a number of distinct values by the row count, and answers fixed by
construction, stated by the question or written in the program rejected with their reason."""

from __future__ import annotations

import random
import re
import sqlite3

import pandas as pd
import pytest
from synth_fixtures import REGIONS, catalog_rows, census_csv

from datamind import references
from datamind.categories import CATEGORY_IDS
from datamind.phrasing import without_format
from datamind.synth.offline import steps as S
from datamind.synth.offline.columns import build_view
from datamind.synth.offline.compose import Hop, build_chains, returns_to
from datamind.synth.offline.engine import answer_problem, synthesize_offline
from datamind.synth.offline.execute import run_in_subprocess
from datamind.synth.offline.generators import Task
from datamind.synth.offline.variants import candidate_variants
from datamind.synth.params import SynthParams
from datamind.synth.table import load_view, synthesize_table_offline

AGGREGATES = ["United States", "Northeast", "Midwest", "South", "West"]


def test_every_question_on_a_census_sheet_leaves_out_and_names_its_totals(root, tmp_path):
    (tmp_path / "files").mkdir()
    path = census_csv(tmp_path / "files" / "census.csv")
    (row,) = catalog_rows(path)
    out = synthesize_table_offline(root, row, SynthParams(queries_per_category=2, n_chains=3), run_id="r")
    assert len(out.rows) > 20
    sentence = "Leave out the aggregate rows whose Geographic Area is 'United States', 'Northeast', 'Midwest', "
    for r in out.rows:
        assert sentence in r["question"], r["question"]
        assert r["reference_answer"] not in AGGREGATES  # the country is never "the highest population"
        assert "df = df[~df['Geographic Area'].isin(" in r["reference_solution"]
    by_q = {without_format(r["question"]).split(" Leave out")[0]: r["reference_answer"] for r in out.rows}
    states = {s: p for ss in REGIONS.values() for s, p in ss}
    assert by_q["Which Geographic Area has the highest pop2019?"] == "California"
    mean = sum(states.values()) / len(states)
    assert by_q["How many records have a pop2019 greater than the average pop2019?"] == str(
        sum(p > mean for p in states.values())
    )  # 4 states; the country and its regions would have made it 9
    # ...and every stored program, run on its own from the file, prints its answer
    jobs = [{"lang": r["solution_lang"], "solution": r["reference_solution"], "db_path": str(path)} for r in out.rows]
    assert [res.get("answer", res.get("error")) for res in run_in_subprocess(jobs, timeout_s=120)] == [
        r["reference_answer"] for r in out.rows
    ]


def test_a_database_table_with_a_total_row_leaves_it_out_in_sql(root, tmp_path):
    db = tmp_path / "files" / "shop.sqlite"
    db.parent.mkdir()
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE sales (store TEXT, region TEXT, revenue INTEGER, units INTEGER)")
    stores = [(f"S{i}", ["north", "south", "east"][i % 3], 100 + 37 * i % 90, 3 + i % 7) for i in range(12)]
    stores.append(("Total", None, sum(s[2] for s in stores), sum(s[3] for s in stores)))
    con.executemany("INSERT INTO sales VALUES (?, ?, ?, ?)", stores)
    con.commit()
    con.close()
    (row,) = catalog_rows(db)
    source, view = load_view(root, row)
    assert source.exclude is not None and source.exclude.values == ("Total",) and view.n_rows == 12
    result = synthesize_offline(view, source, CATEGORY_IDS, 2, 0, row["table_id"])
    sql = [c for cands in result.candidates.values() for c in cands if c.lang == "sql"]
    assert sql and all("""t."store" IS NULL OR t."store" NOT IN ('Total'))""" in c.solution for c in sql)
    jobs = [{"lang": c.lang, "solution": c.solution, "db_path": str(db)} for c in sql]
    assert [r.get("answer") for r in run_in_subprocess(jobs, timeout_s=120)] == [c.answer for c in sql]
    mean = next(c for c in sql if c.task.template == "agg_mean")
    col = ["store", "region", "revenue", "units"].index(mean.task.params["m"])
    assert float(mean.answer) == round(sum(s[col] for s in stores[:-1]) / 12, 4)  # the total row left out


def _shape_missing(view, source):
    cands = synthesize_offline(view, source, ("descriptive_analysis",), 5, 0, "t").candidates["descriptive_analysis"]
    return next(c for c in cands if c.task.template == "desc_shape_missing")


def test_the_missing_values_question_counts_placeholder_text_and_computes_its_answer(root, tmp_path):
    """The BIRD Disney table: voice_actor holds 'None' strings, not NULLs. The old program wrote 'none' as its
    answer (nothing is NULL) and its reference wrote it too, so the wrong answer stayed verified."""
    db = tmp_path / "files" / "disney.sqlite"
    db.parent.mkdir()
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE voices (character TEXT, voice_actor TEXT, movie TEXT, minutes REAL)")
    rows = [(f"c{i}", "None" if i % 4 == 0 else f"actor {i}", f"m{i % 5}", 10.0 + i) for i in range(40)]
    con.executemany("INSERT INTO voices VALUES (?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    (row,) = catalog_rows(db)
    source, view = load_view(root, row)
    cand = _shape_missing(view, source)
    assert cand.answer == "40 rows, 4 columns, voice_actor"
    assert "'None'" in cand.task.question and references.planted_answer(cand.solution, cand.answer) is None
    (res,) = run_in_subprocess([{"lang": cand.lang, "solution": cand.solution, "db_path": str(db)}], timeout_s=60)
    assert res["answer"] == cand.answer
    # nothing missing at all: 'none' is what the program finds, not what it writes
    clean = tmp_path / "clean.csv"
    clean.write_text("a,b\n" + "".join(f"{i},{i * 2}\n" for i in range(10)))
    (row,) = catalog_rows(clean)
    cand = _shape_missing(*reversed(load_view(root, row)))
    assert cand.answer == "10 rows, 2 columns, none" and references.planted_answer(cand.solution, cand.answer) is None


def test_a_measure_with_few_values_is_never_a_group_label():
    """Votes per party (0-3 per polling station) and a dB level: quantities, not labels; a 0/1 flag and a class
    code still group."""
    n = 40
    df = pd.DataFrame(
        {
            "station": [f"s{i}" for i in range(n)],
            "Libertarische Partij (LP)": [0, 1, 2, 3] * (n // 4),
            "noise dB": [40.0, 50.0, 60.0, 70.0, 80.0] * (n // 5),
            "district": ["Noord", "Zuid", "Oost", "West"] * (n // 4),
            "is_urban": [0, 1] * (n // 2),
            "room_type": [1, 2, 3, 1, 2] * (n // 5),
            "turnout": [0.5 + (i * 7 % 40) / 100 for i in range(n)],
        }
    )
    view = build_view(df)
    assert set(view.groups) == {"district", "is_urban", "room_type"}
    assert view.roles["Libertarische Partij (LP)"] == "additive_measure" and "noise dB" in view.measures


def test_a_name_two_keys_share_is_grouped_by_key(root, tmp_path):
    """Chinook holds two playlists named "Music" (ids 1 and 8): grouping tracks by Playlist.Name merges them."""
    db = tmp_path / "files" / "music.sqlite"
    db.parent.mkdir()
    con = sqlite3.connect(db)
    con.executescript(
        """
        CREATE TABLE Playlist (PlaylistId INTEGER PRIMARY KEY, Name TEXT);
        CREATE TABLE PlaylistTrack (PlaylistId INTEGER, TrackId INTEGER, Milliseconds INTEGER,
                                    FOREIGN KEY (PlaylistId) REFERENCES Playlist (PlaylistId));
        INSERT INTO Playlist VALUES (1, 'Music'), (3, 'TV Shows'), (5, '90s Music'), (8, 'Music');
        """
    )
    con.executemany(
        "INSERT INTO PlaylistTrack VALUES (?, ?, ?)",
        [([1, 3, 5, 8][i % 4], i, 180000 + (i * 7919) % 60000) for i in range(40)],
    )
    con.commit()
    con.close()
    rows = {r["table_name"]: r for r in catalog_rows(db)}
    source, view = load_view(root, rows["PlaylistTrack"])
    assert [j.alias for j in source.joins] == ["Playlist.Name"]
    assert "Playlist.Name" not in view.groups and "PlaylistId" in view.groups
    result = synthesize_offline(view, source, CATEGORY_IDS, 3, 0, "t")
    questions = [c.task.question for cands in result.candidates.values() for c in cands]
    assert questions and not [q for q in questions if "Playlist.Name" in q]


def _view(df: pd.DataFrame):
    return build_view(df)


def test_outlier_and_median_shares_fixed_by_construction_are_rejected_with_a_reason():
    rng = random.Random(1)
    df = pd.DataFrame({"x": [rng.gauss(50, 10) for _ in range(200)], "g": ["a", "b"] * 100})
    view = _view(df)
    std = round(float(df["x"].std()), 4)
    spread = S.Value("spread", std, "x", "that standard deviation", ("compute the standard deviation of x",))
    made = S.spread_outliers(view, spread, rng)
    assert made.share_max == 0.25  # Chebyshev: beyond two standard deviations lie at most a quarter of values
    count = S.Value("count", 9, None, "that number of outliers", (*spread.steps, made.step), made.share_max)
    with pytest.raises(S.FixedByConstruction) as caught:  # an outlier count is never half of the records
        S.count_fact(view, count, rng)
    assert "always No" in caught.value.reason
    pct = S.count_pct(view, count, rng)
    share = S.Value("pct", 4.5, None, "that percentage", (*count.steps, pct.step), pct.share_max)
    with pytest.raises(S.FixedByConstruction) as caught:  # 'is the outlier share above 50 percent': always No
        S.pct_fact(view, share, rng)
    assert "always No" in caught.value.reason
    # the share of values at or below the median is about 50 by definition: not asked
    median = S.Value("level", float(df["x"].median()), "x", "that median", ("compute the median x",))
    assert S.level_percentile(view, median, rng) is None
    # a count of distinct values is no count of records: nothing divides it by the row count
    assert S.YIELDS[S.group_distinct] == "distinct" and S.TRANSITIONS["distinct"] == ()


def test_a_gap_step_names_no_direction_its_value_may_not_have():
    """A later hop restates the gap's step: "how far the group lies above the others" read wrong on a gap of
    -109564.83 (the group was below)."""
    df = pd.DataFrame({"g": ["a", "b"] * 20, "x": [v for i in range(20) for v in (10.0 + i, 90.0 + i)]})
    view = _view(df)
    low = S.Value("group", "a", "g", "that g", ("find the g with the lowest x",))
    made = S.group_gap(view, low, random.Random(0))
    scope = {"df": df}
    exec(made.task.py, scope)  # noqa: S102 - the step's own generated body
    assert scope["answer"] == -80.0
    assert not re.search(r"\b(above|higher|more|exceeds?|below|lower|less)\b", made.step), made.step
    assert "minus" in made.step


def test_a_highest_average_resting_on_two_records_is_not_asked():
    """Two boutique stores out-earn the twenty-record chains on average: "which store has the highest average"
    would rank two sales against twenty, and the chain's next step would take a median of two rows."""
    from datamind.synth.offline.templates.lookup import rank_top_mean

    rng = random.Random(3)
    rows = [("Main", 100 + rng.random() * 20) for _ in range(20)] + [
        ("Mall", 90 + rng.random() * 20) for _ in range(20)
    ]
    tiny = pd.DataFrame(rows + [("Boutique", 900.0), ("Boutique", 950.0)], columns=["store", "sales"])
    view = _view(tiny)
    assert view.groups == ["store"] and view.measures == ["sales"]
    assert S.root_top_mean(view, random.Random(0)) is None
    assert list(rank_top_mean(view, random.Random(0))) == []
    # with five sales of its own the boutique's average is a finding, and it is asked
    enough = _view(pd.DataFrame(rows + [("Boutique", 900.0 + i) for i in range(5)], columns=["store", "sales"]))
    made = S.root_top_mean(enough, random.Random(0))
    scope = {"df": enough.df}
    exec(made.task.py, scope)  # noqa: S102 - the step's own generated body
    assert scope["answer"] == "Boutique"
    assert [t.params for t in rank_top_mean(enough, random.Random(0))] == [{"m": "sales", "g": "store"}]


def test_chains_never_come_back_to_a_value_they_started_from(root, tmp_path):
    """Turin -> its most common business -> that business's most common city is Turin again: asks nothing new."""
    rows = [("Turin", "bar")] * 6 + [("Turin", "shop")] * 2 + [("Milan", "shop")] * 5 + [("Milan", "bar")] * 1
    rows += [("Rome", "hotel")] * 3 + [("Rome", "bar")] * 1
    path = tmp_path / "places.csv"
    path.write_text("city,business\n" + "".join(f"{c},{b}\n" for c, b in rows))
    (row,) = catalog_rows(path)
    source, view = load_view(root, row)
    rejected = []
    chains = build_chains(view, source, 6, 3, 3, 0, "t", rejected=rejected)
    for chain in chains:
        for k, hop in enumerate(chain):
            assert returns_to(chain[:k], hop) is None, [h.task.question for h in chain]
    loops = [r for r in rejected if r.code == references.CHAIN_LOOP]
    assert loops and all("comes back to" in r.reason for r in loops)


def test_returns_to_compares_values_of_the_same_column():
    def hop(kind, value, col):
        return Hop(Task("ranking", "t", "", "", ""), "python", "", str(value), S.Value(kind, value, col, "", ()))

    chain = [hop("group", "Turin", "city"), hop("group", "bar", "business")]
    assert returns_to(chain, hop("group", "Turin", "city")) is chain[0]
    assert returns_to(chain, hop("group", "Turin", "district")) is None
    assert returns_to([hop("level", 2.5, "x")], hop("level", 2.5000000001, "x")) is not None


def test_answers_known_without_the_data_are_rejected_with_their_reason():
    view = _view(pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "g": ["a", "b"] * 3}))

    def task(question: str) -> Task:
        return Task("counting", "t", question, "", "")

    planted = answer_problem(
        task("Which column has the most blanks?"), "python", "answer = 'x'\nprint(answer)", "x", view
    )
    assert planted[0] == references.LITERAL_ANSWER and "'x'" in planted[1]
    stated = answer_problem(task("How many records have x equal to 3?"), "python", "print(1)", "3", view)
    assert stated[0] == references.ANSWER_IN_QUESTION
    rows = answer_problem(
        task("After removing duplicates, how many records remain?"), "python", "print(len(df))", "6", view
    )
    assert rows[0] == references.ANSWER_IS_ROW_COUNT
    assert (
        answer_problem(task("How many records have x above 2.5?"), "python", "print((df.x > 2.5).sum())", "4", view)
        is None
    )


def test_synthesis_records_what_it_rejects(root, tmp_path):
    """A run over a table records its rejected questions as rejections with their reason codes (deduplicated:
    a random walk meets the same dead end again)."""
    path = tmp_path / "files" / "values.csv"
    path.parent.mkdir()
    rng = random.Random(3)
    path.write_text(
        "x,y,g\n" + "".join(f"{rng.gauss(50, 10):.3f},{rng.gauss(5, 1):.3f},{'ab'[i % 2]}\n" for i in range(120))
    )
    (row,) = catalog_rows(path)
    row["table_id"] = "values"  # chains are drawn per table id, which otherwise follows the temporary path
    out = synthesize_table_offline(root, row, SynthParams(queries_per_category=1, n_chains=12), run_id="r")
    codes = [r["reason_code"] for r in out.rejections]
    assert references.FIXED_BY_CONSTRUCTION in codes
    assert len({r["item_id"] for r in out.rejections}) == len(out.rejections)
    fixed = next(r for r in out.rejections if r["reason_code"] == references.FIXED_BY_CONSTRUCTION)
    assert fixed["reason"].startswith("fact_checking/chain_fact_") and "always No" in fixed["reason"]


def test_no_template_plants_its_answer(root, small_csv, small_sqlite, tmp_path):
    """One check over every template, on a table without blanks (where the old shape question wrote 'none'), one
    with blanks and a database: no reference program, nor any of its variants, writes its answer as a literal."""
    gaps = tmp_path / "gaps.csv"
    gaps.write_text("g,x,y\n" + "".join(f"{'abc'[i % 3]},{'' if i % 5 == 0 else i},{i * 3 % 7}\n" for i in range(30)))
    checked = 0
    for path in (small_csv, small_sqlite, gaps):
        for row in catalog_rows(path):
            source, view = load_view(root, row)
            result = synthesize_offline(view, source, CATEGORY_IDS, 3, 0, row["table_id"])
            assert not [r for r in result.rejected if r.code == references.LITERAL_ANSWER], row["table_name"]
            for cands in result.candidates.values():
                for c in cands:
                    programs = [(c.solution, c.lang)] + [
                        (v, "python") for v in candidate_variants(c.task, source, c.lang)
                    ]
                    for program, lang in programs:
                        assert references.planted_answer(program, c.answer, lang) is None, program
                        checked += 1
    assert checked > 150


def test_a_model_written_question_names_the_left_out_rows_and_a_planted_answer_is_rejected(root, tmp_path, llm_server):
    """The LLM backend: a program that prints its answer as a literal is rejected (``literal_answer``); a kept
    question says which rows its program leaves out, as the offline ones do."""
    import re

    from synth_fixtures import write_catalog

    from datamind.llm import LLMClient, LLMConfig, ResponseCache
    from datamind.schemas import QUERIES, REJECTIONS
    from datamind.shards import read_rows
    from datamind.synth.params import SynthParams
    from datamind.synth.stage import plan_synthesis, synthesize_shard

    (tmp_path / "files").mkdir()
    write_catalog(root, catalog_rows(census_csv(tmp_path / "files" / "census.csv")))

    def responder(body: dict) -> str:
        prompt = body["messages"][0]["content"]
        read = re.search(r"write only what comes after them:\n(.*?)\n- ", prompt, re.DOTALL).group(1)
        if "# Target question type\nCounting\n" in prompt:
            kind, question, tail = "Counting", "How many states are there?", "print(12)"  # the answer it expects
        else:
            kind, question, tail = "Aggregation", "What is the largest pop2019?", "print(int(df['pop2019'].max()))"
        return (
            f"<question>{question}</question>\n<description>d</description>\n<type>{kind}</type>\n"
            f"<code>\n```python\n{read}\n{tail}\n```\n</code>"
        )

    llm_server.responder = responder
    params = SynthParams(backend="llm", categories=("counting", "aggregation"), queries_per_category=1, n_chains=0)
    config = LLMConfig(
        base_url=llm_server.base_url, api_key="sk-test-not-real", models={"synthesizer": "m"}, timeout_s=2.0
    )
    (spec,) = plan_synthesis(root, 10, params)
    synthesize_shard(root, spec, params, "run", llm_client=LLMClient(config, cache=ResponseCache(root)))
    (kept,) = read_rows(root, QUERIES, "queries")
    assert kept["question"].startswith("What is the largest pop2019?")
    assert kept["question"].endswith("Leave out the aggregate rows whose Geographic Area is 'United States', "
                                     "'Northeast', 'Midwest', 'South' or 'West': they total other rows.")  # fmt: skip
    assert kept["reference_answer"] == "39510"  # California, not the country
    (planted,) = [r for r in read_rows(root, REJECTIONS, "rejections") if r["reason_code"] == "literal_answer"]
    assert "print(12)" in planted["raw"] and "literal 12" in planted["reason"]
