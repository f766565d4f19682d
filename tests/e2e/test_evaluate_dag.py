"""evaluate_agent as Airflow runs it: the form's parameters, the agent Connection pointing the real openai
client at a local OpenAI-protocol server, DABench read from ../shared/data, results where the docs say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes.openai_server import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[2]
API_KEY = "sk-eval-7f3e-SECRET"


@pytest.fixture
def dabench(shared_data):
    return shared_data / "dabench"


def test_evaluate_agent_dag_on_dabench(airflow_db, dabench, tmp_path, monkeypatch, caplog):
    from airflow.dag_processing.dagbag import DagBag

    from datamind.evaluate.suites import load_dabench

    monkeypatch.setenv("DATAMIND_DATA_ROOT", str(tmp_path / "data"))
    items = load_dabench(str(dabench)).items[:2]
    labels = {i.question: i.extra["labels"] for i in items}

    def agent(body: dict) -> str:
        user = body["messages"][1]["content"]
        (question,) = [q for q in labels if f"Question: {q}" in user]
        answer = " ".join(f"@{n}[{v}]" for n, v in labels[question])
        if question == items[0].question:
            return f"<think>Known.</think>\n<answer>{answer}</answer>"
        return "<think>Guess.</think>\n<answer>@x[1]</answer>"

    with FakeOpenAIServer(responder=agent, api_key=API_KEY) as server:
        conn = {"conn_type": "http", "host": server.base_url, "password": API_KEY, "extra": {"models": {"agent": "m"}}}
        monkeypatch.setenv("AIRFLOW_CONN_EVAL_AGENT", json.dumps(conn))
        dag = DagBag(dag_folder=str(REPO / "dags" / "evaluate_agent.py")).dags["evaluate_agent"]
        conf = {"agent_conn_id": "eval_agent", "suites": {"dabench": str(dabench)}, "limit": 2, "trials": 2}
        assert dag.test(run_conf=conf).state == "success"
    (summary_path,) = (tmp_path / "data" / "eval").glob("*/summary.json")
    summary = json.loads(summary_path.read_text())
    fig = summary["suites"]["dabench"]
    assert (fig["n"], fig["pass@1"], fig["pass@2"]) == (2, 0.5, 0.5)
    assert (summary_path.parent / "results.parquet").is_file() and (summary_path.parent / "report.md").is_file()
    assert API_KEY not in caplog.text
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file():
            assert API_KEY.encode() not in path.read_bytes(), path
