"""A checkpoint folder evaluated as the agent: served on loopback behind the OpenAI protocol (CPU path),
driven by the real openai client through the same ReAct loop and sandbox."""

from __future__ import annotations

import json

import pytest

from datamind.evaluate.serve import serve_checkpoint
from datamind.evaluate.stage import evaluate


def _tiny(tmp_path):
    import torch

    from datamind.train.tiny import build_tiny_model

    torch.set_num_threads(1)
    texts = ["<think>look at the table</think>\n<code>\nprint(df)\n</code>", "<answer>7</answer>", "What is the total?"]
    return build_tiny_model(str(tmp_path / "ckpt"), texts)


def test_the_server_speaks_the_openai_protocol(tmp_path):
    import openai

    with serve_checkpoint(_tiny(tmp_path), "ck") as url:
        client = openai.OpenAI(base_url=url, api_key="none")
        assert [m.id for m in client.models.list().data] == ["ck"]
        reply = client.chat.completions.create(
            model="ck", messages=[{"role": "user", "content": "hi"}], max_tokens=5, temperature=0.7, seed=1
        )
        again = client.chat.completions.create(
            model="ck", messages=[{"role": "user", "content": "hi"}], max_tokens=5, temperature=0.7, seed=1
        )
    assert reply.choices[0].finish_reason in ("stop", "length") and reply.model == "ck"
    assert reply.choices[0].message.content == again.choices[0].message.content  # the seed is honoured


def test_a_checkpoint_is_evaluated_as_the_agent(root, tmp_path, sandbox):
    path = tmp_path / "tb.jsonl"
    table = {"columns": ["a", "b"], "data": [["x", 1], ["y", 2], ["z", 4]]}
    path.write_text(
        json.dumps(
            {
                "id": "t1",
                "qtype": "NumericalReasoning",
                "qsubtype": "Aggregation",
                "question": "What is the total of b?",
                "table": table,
                "answer": "7",
            }
        )
        + "\n"
    )
    params = {
        "checkpoint": _tiny(tmp_path),
        "suites": {"tablebench": str(path)},
        "trials": 2,
        "max_turns": 2,
        "max_tokens": 16,
    }
    summary = evaluate(root, params, sandbox=sandbox)
    fig = summary["suites"]["tablebench"]
    assert fig["n"] == 1 and sum(fig["outcomes"].values()) == 2  # both trials ran to an outcome
    assert summary["model"].startswith("checkpoint-")
    import duckdb

    rows = duckdb.sql(f"SELECT model, messages FROM '{root.path('eval', summary['eval_id'], 'results.parquet')}'")
    got = rows.fetchall()
    assert all(r[0] == summary["model"] for r in got)
    # the random model's replies reached the loop (a garbled turn is answered by the environment's note)
    assert any(m["role"] == "assistant" for r in got for m in r[1])


FAKE_VLLM = """
import argparse
from http.server import ThreadingHTTPServer

from datamind.evaluate.serve import CheckpointModel, _handler

ap = argparse.ArgumentParser()
for flag in ("--model", "--served-model-name", "--host"):
    ap.add_argument(flag, required=True)
ap.add_argument("--port", type=int, required=True)
a = ap.parse_args()
ThreadingHTTPServer((a.host, a.port), _handler(CheckpointModel(a.model, a.served_model_name))).serve_forever()
"""


def test_the_vllm_engine_is_launched_waited_for_and_stopped(tmp_path, monkeypatch):
    """The GPU path's process protocol, with a stand-in for vLLM's OpenAI server module (these machines have
    no GPU and no vllm): the same command line, readiness on /v1/models, a stop when evaluation ends."""
    import openai

    from datamind.evaluate.serve import pick_engine, serve

    with pytest.raises(RuntimeError, match="needs the vllm package"):
        with serve(_tiny(tmp_path), "ck", "vllm"):
            pass
    pkg = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent, pkg.parent.parent):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(FAKE_VLLM)
    monkeypatch.syspath_prepend(str(tmp_path / "fake"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    assert pick_engine("auto") == "cpu"  # vllm importable, but no CUDA device here
    with serve(_tiny(tmp_path), "ck", "vllm") as url:
        client = openai.OpenAI(base_url=url, api_key="none")
        assert [m.id for m in client.models.list().data] == ["ck"]
    with pytest.raises(openai.APIConnectionError):
        openai.OpenAI(base_url=url, api_key="none", max_retries=0).models.list()  # the server is gone
