"""A checkpoint folder evaluated as the agent: served on loopback by a real server (``transformers serve`` on
the CPU), driven by the real openai client through the same ReAct loop and sandbox."""

from __future__ import annotations

import json

import pytest

from datamind.evaluate.params import EvalParams
from datamind.evaluate.serve import serve
from datamind.evaluate.stage import evaluate


def _tiny(tmp_path):
    import torch

    from datamind.train.tiny import build_tiny_model

    torch.set_num_threads(1)
    texts = ["<think>look at the table</think>\n<code>\nprint(df)\n</code>", "<answer>7</answer>", "What is the total?"]
    return build_tiny_model(str(tmp_path / "ckpt"), texts)


def test_the_server_speaks_the_openai_protocol(tmp_path):
    import openai
    from transformers import AutoTokenizer

    path = _tiny(tmp_path)
    messages = [{"role": "user", "content": "What is the total of the table?"}]
    with serve(path, "ck", "transformers") as url:
        client = openai.OpenAI(base_url=url, api_key="none")
        reply = client.chat.completions.create(model="ck", messages=messages, max_tokens=5, temperature=0.7, seed=1)
        again = client.chat.completions.create(model="ck", messages=messages, max_tokens=5, temperature=0.7, seed=1)
    assert reply.choices[0].finish_reason in ("stop", "length") and reply.model.split("@")[0] == "ck"
    assert reply.choices[0].message.content == again.choices[0].message.content  # the seed is honoured
    # usage is counted in the model's own tokens (the chat-templated prompt), not in words
    tok = AutoTokenizer.from_pretrained(path)
    prompt_ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    prompt_ids = prompt_ids["input_ids"] if hasattr(prompt_ids, "keys") else prompt_ids
    assert reply.usage.prompt_tokens == len(prompt_ids) != len(messages[0]["content"].split())
    assert 1 <= reply.usage.completion_tokens <= 5


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
    params = EvalParams(
        checkpoint=_tiny(tmp_path), suites={"tablebench": str(path)}, trials=2, max_turns=2, max_tokens=16
    )
    summary = evaluate(root, params, sandbox=sandbox)
    fig = summary["suites"]["tablebench"]
    assert fig["n"] == 1 and sum(fig["outcomes"].values()) == 2  # both trials ran to an outcome
    assert summary["model"].startswith("checkpoint-") and summary["agent"] == "checkpoint"  # not "offline"
    import duckdb

    rows = duckdb.sql(f"SELECT model, messages FROM '{root.path('eval', summary['eval_id'], 'results.parquet')}'")
    got = rows.fetchall()
    assert all(r[0] == summary["model"] for r in got)
    # a random model's 16-token replies are the agent's own failures, recorded as what they were (a cut reply,
    # void turns, turns run out), never as a platform error
    behaviour = {"wrong", "no_answer", "max_turns", "void_turn_limit", "reply_truncated"}
    assert set(fig["outcomes"]) <= behaviour, fig["outcomes"]


FAKE_VLLM = """
import argparse, json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
for flag in ("--model", "--served-model-name", "--host", "--max-model-len"):
    ap.add_argument(flag, required=True)
ap.add_argument("--port", type=int, required=True)
a = ap.parse_args()


class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": a.served_model_name, "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


ThreadingHTTPServer((a.host, a.port), H).serve_forever()
"""


def test_the_vllm_engine_is_launched_waited_for_and_stopped(tmp_path, monkeypatch):
    """The GPU path's process protocol, with a stand-in for vLLM's OpenAI server module (these machines have
    no GPU and no vllm): the same command line, readiness on /v1/models, a stop when evaluation ends."""
    import openai

    from datamind.llm.serving import ServeError, ServeSpec, pick_engine

    with pytest.raises(ServeError, match="needs the vllm package"):
        with serve(_tiny(tmp_path), "ck", "vllm"):
            pass
    pkg = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent, pkg.parent.parent):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(FAKE_VLLM)
    monkeypatch.syspath_prepend(str(tmp_path / "fake"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    ckpt = _tiny(tmp_path)
    assert pick_engine(ServeSpec(ckpt, "ck")) == "transformers"  # vllm importable, but no CUDA device here
    with serve(ckpt, "ck", "vllm") as url:
        client = openai.OpenAI(base_url=url, api_key="none")
        assert [m.id for m in client.models.list().data] == ["ck"]
    with pytest.raises(openai.APIConnectionError):
        openai.OpenAI(base_url=url, api_key="none", max_retries=0).models.list()  # the server is gone
