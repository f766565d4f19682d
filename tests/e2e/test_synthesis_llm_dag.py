"""synthesize_queries with the LLM backend, as Airflow runs it: the `datamind_llm` Connection points the real
openai client at a local OpenAI-compatible server; a second run over the same tables sends no request."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest
from fakes.openai_server import FakeOpenAIServer

from datamind.ingest.sources import list_source_files
from datamind.ingest.stage import ingest_shard, plan_ingest
from datamind.profile.stage import plan_profile, profile_shard
from datamind.storage import DataRoot

REPO = Path(__file__).resolve().parents[2]
API_KEY = "sk-e2e-4b1d9c7e-SECRET"


def reply(body: dict) -> str:
    """A well-formed answer of the category the prompt asks for (a wrong <type> is rightly rejected)."""
    prompt = body["messages"][-1]["content"]
    found = re.search(r"# Target question type\n(.+)\n", prompt)
    kind = found.group(1).strip() if found else "Ranking"
    return (
        f"<question>Which region has the largest total by {kind.lower()}?</question>\n"
        f"<description>Group and sum, then take the max.</description>\n<type>{kind}</type>\n"
        f"<code>\n{PROGRAM}\n</code>"
    )


PROGRAM = (
    "import pandas as pd\ndf = pd.read_csv('sales_orders.csv')\nprint(df.groupby('region')['revenue'].sum().idxmax())"
)


@pytest.fixture
def seeded_root(tmp_path, monkeypatch):
    monkeypatch.setenv("DATAMIND_DATA_ROOT", str(tmp_path / "data"))
    root = DataRoot(str(tmp_path / "data"))
    files = [f for f in list_source_files(str(REPO / "samples" / "files")) if f.rel_path.endswith("sales_orders.csv")]
    assert files, "samples/files/sales_orders.csv is the fixture"
    for spec in plan_ingest(root, files, "e2e", 10):
        ingest_shard(root, spec, None, "seed")
    for spec in plan_profile(root, 10):
        profile_shard(root, spec, "seed")
    return tmp_path / "data"


def _run(conf):
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(REPO / "dags" / "synthesize_queries.py")).dags["synthesize_queries"]
    return dag.test(run_conf=conf)


def test_llm_backend_through_the_dag_and_cached_rerun(airflow_db, seeded_root, monkeypatch, caplog):
    with FakeOpenAIServer(responder=reply, api_key=API_KEY) as server:
        conn = {
            "conn_type": "http",
            "host": server.base_url,
            "password": API_KEY,
            "extra": {"models": {"synthesizer": "synth-e2e"}, "max_retries": 1},
        }
        monkeypatch.setenv("AIRFLOW_CONN_DATAMIND_LLM", json.dumps(conn))
        conf = {"backend": "llm", "categories": ["ranking", "counting"], "queries_per_category": 1, "n_chains": 0}
        assert _run(conf).state == "success"
        first_calls = server.request_count
        assert first_calls >= 2

        rows = duckdb.sql(
            f"SELECT category, backend, model, prompt_tokens, completion_tokens, question FROM "
            f"'{seeded_root}/queries/**/*.parquet'"
        ).fetchall()
        assert {r[0] for r in rows} == {"ranking", "counting"}
        assert {r[1] for r in rows} == {"llm"} and {r[2] for r in rows} == {"synth-e2e"}
        # The fake counts whitespace-separated words: every stored completion has the reply's word count.
        assert all(
            r[4] == len(reply({"messages": [{"content": f"# Target question type\n{r[0]}\n"}]}).split()) for r in rows
        )
        assert all(re.match(r"Which region has the largest total", r[5]) for r in rows)
        # the model's program ran (in the sandbox, on the staged copy): its output is the reference answer
        import pandas as pd

        top = pd.read_csv(REPO / "samples" / "files" / "sales_orders.csv").groupby("region")["revenue"].sum().idxmax()
        refs = duckdb.sql(f"SELECT reference_answer FROM '{seeded_root}/queries/**/*.parquet'").fetchall()
        assert refs and {r[0] for r in refs} == {top}

        # Rerun: the stage plans nothing new, and even a fresh run over the same prompts hits the cache.
        assert _run(conf).state == "success"
        assert server.request_count == first_calls
    assert API_KEY not in caplog.text
    for path in seeded_root.rglob("*"):
        if path.is_file():
            assert API_KEY.encode() not in path.read_bytes(), path


def test_batch_mode_through_the_dag_waits_on_the_trigger_and_writes_the_online_rows(
    airflow_db, seeded_root, monkeypatch, caplog
):
    """request_mode=batch: the shard submits its requests to the Batch API, defers to the trigger (run in line
    by dag.test, as the triggerer runs it), resumes, and writes what the online run wrote; no online call."""
    with FakeOpenAIServer(responder=reply, api_key=API_KEY) as server:
        server.batch_delay_s = 1.0  # still running when the task first looks: it defers
        conn = {"conn_type": "http", "host": server.base_url, "password": API_KEY,
                "extra": {"models": {"synthesizer": "synth-e2e"}, "max_retries": 1}}  # fmt: skip
        monkeypatch.setenv("AIRFLOW_CONN_DATAMIND_LLM", json.dumps(conn))
        conf = {"backend": "llm", "categories": ["ranking", "counting"], "queries_per_category": 1, "n_chains": 0,
                "request_mode": "batch", "batch_poll_s": 0.2}  # fmt: skip
        run = _run(conf)
        assert run.state == "success"
        assert server.request_count == 0 and len(server.batches) == 1
        (shard,) = [t for t in run.get_task_instances() if t.task_id == "process_shard"]
        assert shard.state == "success" and shard.try_number == 1  # resumed after the deferral, not retried
        rows = duckdb.sql(f"SELECT category, model, question FROM '{seeded_root}/queries/**/*.parquet'").fetchall()
        assert {r[0] for r in rows} == {"ranking", "counting"} and {r[1] for r in rows} == {"synth-e2e"}
        assert "running trigger in line" in caplog.text  # it deferred, and the trigger fired
    assert API_KEY not in caplog.text
    for path in seeded_root.rglob("*"):
        if path.is_file():
            assert API_KEY.encode() not in path.read_bytes(), path
