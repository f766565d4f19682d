"""evaluate_agent end to end: benchmark loaders over real files, an agent behind a local OpenAI-protocol
server whose replies are scripted per question and trial (so pass@1 and pass@3 are known in advance),
the real ReAct loop and sandbox, the rule judges, and the written results, summary and report."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections import Counter
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest

from datamind.evaluate import judges
from datamind.evaluate.stage import EvalParams, evaluate, pass_at
from datamind.evaluate.suites import SuiteError, load_bird, load_dabench, load_tablebench
from datamind.schemas import EVAL_RESULTS

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def expected(script: dict[str, list[bool]]) -> tuple[float, float]:
    """pass@1 / pass@3 straight from the definition: mean of per-question accuracy; share with any success."""
    return (
        sum(sum(v) / len(v) for v in script.values()) / len(script),
        sum(1 for v in script.values() if any(v)) / len(script),
    )


class ScriptedAgent:
    """Trial i of question q answers right when ``script[q][i]``. A trial is told apart by a number its
    first turn writes into its think; later turns read it back from the conversation."""

    def __init__(self, questions: dict[str, str], script: dict[str, list[bool]], first_code, final_turns) -> None:
        self.questions, self.script = questions, script
        self.first_code, self.final_turns = first_code, final_turns
        self.started: Counter = Counter()
        self.lock = threading.Lock()

    def key(self, user: str) -> str:
        (key,) = [k for k, q in self.questions.items() if f"Question: {q}" in user]
        return key

    def __call__(self, body: dict) -> str:
        msgs = body["messages"]
        key = self.key(msgs[1]["content"])
        mine = [m["content"] for m in msgs if m["role"] == "assistant"]
        if not mine:
            with self.lock:
                trial = self.started[key]
                self.started[key] += 1
            code = self.first_code(key)
            return f"<think>Trial {trial}: first a look at the data.</think>\n<code>\n```python\n{code}\n```\n</code>"
        trial = int(re.search(r"Trial (\d+)", mine[0]).group(1))
        turns = self.final_turns(key, self.script[key][trial])
        return turns[len(mine) - 1]


def test_pass_at_k_on_crafted_outcomes():
    outcomes = {"a": [True, True, True], "b": [True, False, False], "c": [False, False, False], "d": [False, True]}
    p1, p3 = pass_at(outcomes)
    assert p1 == pytest.approx((1 + 1 / 3 + 0 + 1 / 2) / 4)
    assert p3 == pytest.approx(3 / 4)
    assert pass_at({}) == (0.0, 0.0)


def test_dabench_matcher_follows_infiagent():
    labels = [["mean_fare", "34.65"], ["label", "Yes"]]
    assert judges.judge_dabench("@mean_fare[34.65], @label[yes]", labels).correct
    assert judges.judge_dabench("The fare is @mean_fare[34.650000] and @label[Yes]", labels).correct
    v = judges.judge_dabench("@mean_fare[34.66] @label[Yes]", labels)
    assert not v.correct and "mean_fare" in v.reasoning
    assert not judges.judge_dabench("@mean_fare[34.65]", labels).correct  # every sub-answer is needed
    assert not judges.judge_dabench("34.65, Yes", labels).correct


def test_sql_calls_are_read_from_the_agents_code():
    code = (
        "q = 'SELECT a FROM t'\nprint(execute_sql(q, 'r.csv'))\nexecute_sql(sql='SELECT b FROM t', output_path='s.csv')"
    )
    assert judges.sql_calls(code) == ["SELECT a FROM t", "SELECT b FROM t"]
    assert judges.sql_calls("execute_sql(build(), 'x.csv')") == []


@pytest.fixture
def dabench(shared_data):
    return shared_data / "dabench"


def test_dabench_with_a_scripted_agent(root, dabench, server, agent_client, sandbox):
    items = load_dabench(str(dabench)).items[:5]
    assert len(items) == 5 and all(i.data_format == "csv" and Path(i.data_path).is_file() for i in items)
    patterns = [
        [True, True, True],
        [True, False, False],
        [False, False, False],
        [False, True, False],
        [True, True, False],
    ]
    script = {i.item_id: p for i, p in zip(items, patterns, strict=True)}
    labels = {i.item_id: i.extra["labels"] for i in items}
    files = {i.item_id: Path(i.data_path).name for i in items}

    def first(key):
        return f"import pandas as pd\ndf = pd.read_csv({files[key]!r})\nprint(df.shape)"

    def final(key, right):
        value = " ".join(f"@{n}[{v if right else '-987654.321'}]" for n, v in labels[key])
        return [f"<think>The table has loaded; the result follows.</think>\n<answer>{value}</answer>"]

    server.responder = ScriptedAgent({i.item_id: i.question for i in items}, script, first, final)
    params = EvalParams(agent_conn_id="datamind_agent", suites={"dabench": str(dabench)}, limit=5)
    summary = evaluate(root, params, agent_client, sandbox=sandbox)

    p1, p3 = expected(script)
    fig = summary["suites"]["dabench"]
    assert (fig["n"], fig["pass@1"], fig["pass@3"]) == (5, round(p1, 4), round(p3, 4))
    assert fig["outcomes"] == {"correct": 7, "wrong": 8}
    # every request used the paper's sampling settings and the trained prompt format (no category hints)
    bodies = [b for b in server.bodies if b["model"] == "agent-under-test"]
    assert {(b["temperature"], b["top_p"]) for b in bodies} == {(0.7, 0.95)}
    assert all("How to approach" not in b["messages"][0]["content"] for b in bodies)
    eval_dir = Path(root.path("eval", summary["eval_id"]))
    rows = duckdb.sql(f"SELECT item_id, trial, correct, judge, messages FROM '{eval_dir}/results.parquet'").fetchall()
    assert len(rows) == 15 and {r[3] for r in rows} == {"rule:dabench"}
    assert Counter(r[0] for r in rows if r[2]) == Counter({k: sum(v) for k, v in script.items() if any(v)})
    # the interpreter really ran each first step in the sandbox: the table's shape came back
    obs = {r[0]: r[4][3]["content"] for r in rows}
    import pandas as pd

    for i in items:
        assert str(pd.read_csv(i.data_path).shape) in obs[i.item_id]
    report = (eval_dir / "report.md").read_text()
    assert f"pass@1 {p1:.1%}" in report and "Summary Statistics" in report
    assert json.loads((eval_dir / "summary.json").read_text())["suites"]["dabench"]["pass@3"] == round(p3, 4)
    # listed with the other quality reports, its contract checks passing
    index = Path(root.path("reports", "index.html")).read_text()
    assert "evaluate_agent" in index and summary["eval_id"] in index and "FAIL" not in index
    # a rerun with the same parameters rewrites the same folder: one results file, same ids
    again = evaluate(root, params, agent_client, sandbox=sandbox)
    assert again["eval_id"] == summary["eval_id"] and len(list(Path(root.path("eval")).glob("*/results.parquet"))) == 1


def test_bird_style_suite_over_spider_databases(root, shared_data, server, agent_client, sandbox):
    folder = shared_data / "sqlite" / "spider_de"
    loaded = load_bird(str(folder))
    assert loaded.skipped["missing_database"] > 0  # dev questions over databases not shipped here
    items = []
    for item in loaded.items:  # four questions whose gold SQL returns rows on the shipped database
        con = sqlite3.connect(f"file:{item.data_path}?mode=ro", uri=True)
        try:
            if con.execute(item.gold).fetchall():
                items.append(item)
        except sqlite3.Error:
            pass
        finally:
            con.close()
        if len(items) == 4:
            break
    patterns = [[True, True, True], [False, False, False], [True, False, True], [False, False, True]]
    script = {i.item_id: p for i, p in zip(items, patterns, strict=True)}
    gold = {i.item_id: i.gold for i in items}

    def first(key):
        return "print(get_db_info())"

    def final(key, right):
        # a right trial wraps the gold query (same rows, different text); a wrong one returns other rows
        sql = f"SELECT * FROM ({gold[key].rstrip().rstrip(';')})" if right else "SELECT 'nothing' AS x"
        return [
            "<think>Now the query.</think>\n"
            f"<code>\n```python\nprint(execute_sql({sql!r}, 'result.csv'))\n```\n</code>",
            "<think>The result table is written.</think>\n<answer>See result.csv.</answer>",
        ]

    server.responder = ScriptedAgent({i.item_id: i.question for i in items}, script, first, final)
    # the suite loader is given the same folder; limit picks the first loaded questions, so run those only
    params = EvalParams(agent_conn_id="datamind_agent", suites={"bird": str(folder)}, limit=len(loaded.items))
    from datamind.evaluate.runner import Runner
    from datamind.evaluate.stage import judge_trials, summarize

    trials = Runner(params, agent_client, root=root, sandbox=sandbox).run(items)
    rows = judge_trials(trials, None, "eval-test")
    fig = summarize(rows, 3)["bird"]
    p1, p3 = expected(script)
    assert (fig["n"], fig["pass@1"], fig["pass@3"]) == (4, round(p1, 4), round(p3, 4))
    assert {r["judge"] for r in rows} == {"rule:sql_rows"}
    assert all("Table " in r["messages"][3]["content"] for r in rows)  # get_db_info ran in the SQL session


def test_tablebench_file_written_by_the_test(root, tmp_path, server, agent_client, sandbox):
    records = [
        {
            "id": "t1",
            "qtype": "NumericalReasoning",
            "qsubtype": "Aggregation",
            "question": "What is the total of b?",
            "table": json.dumps({"columns": ["a", "b"], "data": [["x", 1], ["y", 2], ["z", 4]]}),
            "answer": "7",
        },
        {
            "id": "t2",
            "qtype": "FactChecking",
            "qsubtype": "MatchBased",
            "question": "Which a has the largest b?",
            "table": {"columns": ["a", "b"], "data": [["x", 1], ["y", 9]]},
            "answer": "y",
        },
        {
            "id": "t3",
            "qtype": "DataAnalysis",
            "qsubtype": "TrendForecasting",
            "question": "Next b?",
            "table": {"columns": ["a", "b"], "data": [["x", 1]]},
            "answer": "2",
        },
        {
            "id": "t4",
            "qtype": "Visualization",
            "qsubtype": "ChartGeneration",
            "question": "Plot b.",
            "table": {"columns": ["a", "b"], "data": [["x", 1]]},
            "answer": "y_references = [[1]]",
        },
    ]
    path = tmp_path / "tablebench.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    loaded = load_tablebench(str(path), str(tmp_path / "tables"))
    assert [i.item_id for i in loaded.items] == ["tablebench-t1", "tablebench-t2"]
    assert sum(loaded.skipped.values()) == 2
    assert (tmp_path / "tables" / "tablebench-t1.csv").read_text().splitlines() == ["a,b", "x,1", "y,2", "z,4"]
    script = {"tablebench-t1": [True, False, True], "tablebench-t2": [False, False, False]}
    answers = {"tablebench-t1": ("7", "6"), "tablebench-t2": ("y", "x")}

    def first(key):
        return f"import pandas as pd\ndf = pd.read_csv('{key}.csv')\nprint(df)"

    def final(key, right):
        return [f"<think>Read off the table.</think>\n<answer>{answers[key][0 if right else 1]}</answer>"]

    server.responder = ScriptedAgent({i.item_id: i.question for i in loaded.items}, script, first, final)
    summary = evaluate(
        root, EvalParams(agent_conn_id="a", suites={"tablebench": str(path)}), agent_client, sandbox=sandbox
    )
    fig = summary["suites"]["tablebench"]
    p1, p3 = expected(script)
    assert (fig["n"], fig["pass@1"], fig["pass@3"]) == (2, round(p1, 4), round(p3, 4))
    assert set(fig["by_category"]) == {"NumericalReasoning/Aggregation", "FactChecking/MatchBased"}
    assert summary["skipped"]["tablebench"] and EVAL_RESULTS.name == "eval_results"


def test_bad_parameters_fail_at_once(root):
    with pytest.raises(ValueError, match="unknown suite kinds"):
        EvalParams(suites={"mmlu": "/x"})
    with pytest.raises(ValueError, match="at least one suite"):
        EvalParams()
    with pytest.raises(SuiteError, match="held-out split"):
        evaluate(root, EvalParams(suites={"dabench": "/nowhere"}))
    with pytest.raises(SuiteError, match="no DABench questions file"):
        load_dabench(str(root.path()))


def test_the_model_as_judge_grades_free_form_answers(root, tmp_path, server, agent_client, sandbox):
    """With a judge endpoint, free-form answers are graded by the paper's model-as-judge (its reasoning and
    model kept with each verdict); here it accepts a paraphrase the 3% rule cannot read."""
    from datamind.llm import LLMClient, LLMConfig, ResponseCache

    path = tmp_path / "tb.jsonl"
    table = {"columns": ["a", "b"], "data": [["x", 1], ["y", 9]]}
    path.write_text(
        json.dumps(
            {
                "id": "t2",
                "qtype": "FactChecking",
                "qsubtype": "MatchBased",
                "table": table,
                "question": "Which a has the largest b?",
                "answer": "y",
            }
        )
        + "\n"
    )
    loaded = load_tablebench(str(path), str(tmp_path / "tables"))

    def agent(body):
        if body["model"] == "judge-model":
            prompt = body["messages"][0]["content"]
            ok = "row y" in prompt.split("# Predicted answer", 1)[1]
            thought = f"The prediction names {'the same' if ok else 'another'} row."
            return f"<thought>{thought}</thought><score>{int(ok)}</score>"
        return ScriptedAgent(
            {i.item_id: i.question for i in loaded.items},
            {"tablebench-t2": [True, True, True]},
            lambda key: "import pandas as pd\nprint(pd.read_csv('tablebench-t2.csv'))",
            lambda key, right: ["<think>Read it off.</think>\n<answer>It is row y, with b = 9.</answer>"],
        )(body)

    server.responder = agent
    config = LLMConfig(base_url=server.base_url, api_key="sk-test", models={"judge": "judge-model"}, max_retries=1)
    judge = LLMClient(config, cache=ResponseCache(root))
    params = EvalParams(agent_conn_id="a", suites={"tablebench": str(path)})
    summary = evaluate(root, params, agent_client, judge, sandbox=sandbox)
    assert summary["suites"]["tablebench"]["pass@1"] == 1.0
    rows = duckdb.sql(
        f"SELECT judge, judge_reasoning FROM '{root.path('eval', summary['eval_id'], 'results.parquet')}'"
    ).fetchall()
    assert {r[0] for r in rows} == {"llm:judge-model"} and all("same" in r[1] for r in rows)
    # the rule judge alone cannot see that "It is row y, with b = 9." answers "y"
    rule = evaluate(root, replace(params, trials=1), agent_client, sandbox=sandbox)
    assert rule["suites"]["tablebench"]["pass@1"] == 0.0

    # The judge through the Batch API (request_mode=batch) grades the same trials the same way, asking each
    # verdict once; the agent's turns stay online (answered from the cache here, as a rerun would be).
    from datamind.llm.batch import run_batched
    from datamind.storage import DataRoot

    batch_root = DataRoot(str(tmp_path / "batch"))
    judge_b = LLMClient(config, cache=ResponseCache(batch_root))
    asked = [b for b in server.bodies if b["model"] == "judge-model"]
    summary_b = run_batched(lambda r, c: evaluate(r, params, agent_client, c, sandbox=sandbox), batch_root, judge_b,
                            "evaluate", poll_s=0.01)  # fmt: skip
    assert [b for b in server.bodies if b["model"] == "judge-model"] == asked  # no online judge call
    assert len(server.batch_bodies) == len(asked) and len(summary_b["batches"]) == 1
    verdicts = "SELECT item_id, trial, correct, judge, judge_reasoning FROM '{}' ORDER BY 1, 2"
    online_rows = duckdb.sql(verdicts.format(root.path("eval", summary["eval_id"], "results.parquet"))).fetchall()
    batch_rows = duckdb.sql(
        verdicts.format(batch_root.path("eval", summary_b["eval_id"], "results.parquet"))
    ).fetchall()
    assert batch_rows == online_rows


@pytest.mark.parametrize(
    "status, error, answer, correct, expected",
    [
        ("answered", None, "7", True, "correct"),
        ("answered", None, "8", False, "wrong"),
        ("answered", None, "  ", False, "no_answer"),
        ("max_turns", None, None, False, "max_turns"),
        ("error", "void_turn_limit", None, False, "void_turn_limit"),
        ("error", "reply_truncated", None, False, "reply_truncated"),
        ("error", "sandbox_failure", None, False, "sandbox_error"),
        ("error", "endpoint_unavailable", None, False, "endpoint_error"),
        (None, None, None, False, "not_run"),
    ],
)
def test_each_trial_keeps_what_the_agent_really_did(status, error, answer, correct, expected):
    """A trial that hit the void-turn limit or a cut reply says so; platform failures are kept apart from the
    agent's behaviour, and every outcome is one the results table's quality suite accepts."""
    from datamind.agent.loop import AgentResult
    from datamind.evaluate.runner import Trial
    from datamind.evaluate.stage import _outcome
    from datamind.vocabulary import EVAL_OUTCOMES

    result = None if status is None else AgentResult([], answer, status, 3, 0, error=error)
    got = _outcome(Trial(item=None, trial=0, result=result, model=None), correct)
    assert got == expected and got in EVAL_OUTCOMES


def test_how_the_agent_worked_is_counted_per_turn_and_per_trial():
    """Format, code that ran and answers are read from the turns themselves: a cut reply counts as a void
    turn, code that raised does not count as code that ran, and the report's comparison shows all three."""
    from datamind.agent import protocol
    from datamind.evaluate.stage import behaviour, render_report

    ran = protocol.format_interpreter(protocol.observation_text(True, "42", None))
    raised = protocol.format_interpreter(protocol.observation_text(False, "KeyError: 'x'", "exception"))
    code = protocol.format_code_turn("look first", "print(42)")
    first = {
        "outcome": "correct",
        "final_answer": "42",
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": code},
            {"role": "tool", "content": ran},
            {"role": "assistant", "content": "The answer is 42."},  # no tags: void
            {"role": "tool", "content": protocol.format_interpreter(protocol.void_note("no_action"))},
            {"role": "assistant", "content": code},
            {"role": "tool", "content": raised},
            {"role": "assistant", "content": "<think>\nok\n</think>\n<answer>\n42\n</answer>"},
        ],
    }
    cut = {"outcome": "reply_truncated", "final_answer": None, "messages": first["messages"][:2]}
    fig = behaviour([first, cut])
    assert fig == {"turns": 5, "valid_format": 0.6, "runnable_code": 0.2, "answer_rate": 0.5}
    summary = {
        "eval_id": "e1",
        "agent": "a",
        "model": "m",
        "trials": 1,
        "params": {"temperature": 0.7, "top_p": 0.95},
        "suites": {"heldout": {"n": 2, "pass@1": 0.5, "outcomes": {}, "by_category": {}, **fig}},
        "skipped": {},
    }
    report = render_report(summary, [summary])
    assert "| heldout | e1 | a | m | 2 | 60.0% | 20.0% | 50.0% | 50.0% |" in report


def test_the_leak_control_withholds_the_data_file_and_says_so(root, dabench, server, agent_client, sandbox):
    items = load_dabench(str(dabench)).items[:2]
    files = {i.item_id: Path(i.data_path).name for i in items}
    labels = {i.item_id: i.extra["labels"] for i in items}

    def first(key):
        return f"import os\nprint(sorted(os.listdir('.')))\nimport pandas as pd\npd.read_csv({files[key]!r})"

    def final(key, right):  # the first question answered right anyway: what a model that memorised it would do
        value = " ".join(f"@{n}[{v if right else '-987654.321'}]" for n, v in labels[key])
        return [f"<think>No data; from memory.</think>\n<answer>{value}</answer>"]

    script = {items[0].item_id: [True], items[1].item_id: [False]}
    server.responder = ScriptedAgent({i.item_id: i.question for i in items}, script, first, final)
    plain = EvalParams(agent_conn_id="datamind_agent", suites={"dabench": str(dabench)}, limit=2, trials=1)
    params = replace(plain, withhold_data=True)
    assert params.eval_id() != plain.eval_id()  # the control never overwrites the evaluation it controls
    summary = evaluate(root, params, agent_client, sandbox=sandbox)
    assert summary["suites"]["dabench"]["pass@1"] == 0.5  # a correct answer without data counts: the leak rate
    rows = duckdb.sql(f"SELECT item_id, messages FROM '{root.path('eval', summary['eval_id'])}/results.parquet'")
    for item_id, msgs in rows.fetchall():
        user, observation = msgs[1]["content"], msgs[3]["content"]
        assert f"`{files[item_id]}` is withheld" in user and "Data source: `" not in user
        assert files[item_id] not in observation.split("]")[0]  # the working directory's listing lacks it
        assert "FileNotFoundError" in observation or "No such file" in observation


@pytest.mark.parametrize("grammar", [None, "llama.cpp"])
def test_a_served_checkpoint_gets_the_grammar_asked_for_and_only_then(
    root, dabench, server, sandbox, grammar, monkeypatch
):
    from contextlib import contextmanager

    import datamind.evaluate.serve as serve_mod

    served = []

    @contextmanager
    def fake_serve(path, name, engine="auto", threads=0):
        served.append((path, name))
        yield server.base_url

    monkeypatch.setattr(serve_mod, "serve", fake_serve)
    item = load_dabench(str(dabench)).items[0]
    answer = " ".join(f"@{n}[{v}]" for n, v in item.extra["labels"])
    server.responder = lambda body: f"<think>From the table.</think>\n<answer>{answer}</answer>"
    params = EvalParams(checkpoint="/models/tuned.gguf", suites={"dabench": str(dabench)}, limit=1, trials=1,
                        grammar=grammar)  # fmt: skip
    summary = evaluate(root, params, sandbox=sandbox)
    assert summary["suites"]["dabench"]["pass@1"] == 1.0 and served[0][0].endswith("tuned.gguf")
    from datamind.evaluate.stage import written_id

    assert summary["eval_id"] == written_id(params)  # where a rerun finds the finished evaluation
    bodies = [b for b in server.bodies if b["model"] == served[0][1]]
    assert bodies and all(("grammar" in b) == bool(grammar) for b in bodies)
    if grammar:
        assert "<answer>" in bodies[0]["grammar"]  # the turn format's grammar, not some other
