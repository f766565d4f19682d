"""Batch mode (datamind.llm.batch) against the loopback server speaking the files and batches protocol."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes.batch_shard import QUESTIONS, client_for, two_step_shard

from datamind.llm import LLMClient, run_all
from datamind.llm.batch import run_batched
from datamind.llm.errors import LLMCallError


def _client(server, api_key, root) -> LLMClient:
    return client_for(server.base_url, api_key, root)


def _reply(body):
    return "echo " + body["messages"][-1]["content"].upper()


def test_a_task_killed_while_it_waits_is_rerun_without_submitting_anything_new(server, api_key, tmp_path):
    """kill -9 during the wait: the rerun finds the batch it submitted (its record) and takes its answers."""
    from datamind.storage import DataRoot

    server.responder = _reply
    server.batch_delay_s = 3600  # the first batch stays in progress while the task waits
    root = tmp_path / "batch"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "fakes.batch_shard", server.base_url, api_key, str(root)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not server.batches and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read().decode()
            time.sleep(0.05)
        assert len(server.batches) == 1
        time.sleep(0.3)  # it is waiting now: polling the batch
    finally:
        proc.kill()  # SIGKILL: no cleanup of any kind
        proc.wait()
    (first,) = server.batches
    uploads = len(server.files)

    server.batch_delay_s = 0
    summary = run_batched(two_step_shard(QUESTIONS), DataRoot(str(root)), _client(server, api_key, DataRoot(str(root))),
                          "shard-k", poll_s=0.01)  # fmt: skip
    assert summary["batches"][0]["batch_id"] == first  # taken in, not submitted again
    assert len(server.batches) == 2 and summary["answered"] == len(QUESTIONS)  # the second hop's batch
    assert len(server.batch_bodies) == 2 * len(QUESTIONS)  # every request answered once
    assert len([f for f in server.files.values() if f["purpose"] == "batch"]) == 2 and uploads == 1


def test_batch_mode_writes_what_online_writes_and_pays_half(server, api_key, tmp_path):
    from datamind.storage import DataRoot

    server.responder = _reply
    questions = [f"question {i}" for i in range(5)]
    online_root = DataRoot(str(tmp_path / "online"))
    online = two_step_shard(questions)(online_root, _client(server, api_key, online_root))
    online_calls = server.request_count
    assert online_calls == 10 and online == {"rows": 5, "answered": 5}

    server.reset()
    server.responder = _reply
    root = DataRoot(str(tmp_path / "batch"))
    client = _client(server, api_key, root)
    summary = run_batched(two_step_shard(questions), root, client, "shard-1", poll_s=0.01)
    assert server.request_count == 0  # not one online call
    assert [b["requests"] for b in summary["batches"]] == [5, 5]  # one batch per step of the chain
    assert len(server.batch_bodies) == 10 and len(server.batches) == 2
    assert root.read_text("out/rows.json") == online_root.read_text("out/rows.json")
    assert {k: v for k, v in summary.items() if k != "batches"} == online
    # the price: words are tokens here; the batch pays half of what the same tokens cost online
    tokens = [(b["prompt_tokens"], b["completion_tokens"]) for b in summary["batches"]]
    online_price = sum(p * 2.0 + c * 8.0 for p, c in tokens) / 1e6
    assert sum(b["cost_usd"] for b in summary["batches"]) == pytest.approx(online_price / 2)
    # a rerun pays nothing: every answer is in the cache
    again = run_batched(two_step_shard(questions), root, client, "shard-1", poll_s=0.01)
    assert again["batches"] == [] and len(server.batches) == 2


def test_failed_and_expired_lines_are_asked_again_then_recorded_with_their_reason(server, api_key, tmp_path):
    from datamind.storage import DataRoot

    server.responder = _reply
    server.batch_outcome = lambda line: "failed" if "question 1" in json.dumps(line["body"]) else (
        "expired" if "question 2" in json.dumps(line["body"]) else None)  # fmt: skip
    root = DataRoot(str(tmp_path / "batch"))
    summary = run_batched(two_step_shard([f"question {i}" for i in range(3)]), root, _client(server, api_key, root),
                          "shard-f", poll_s=0.01, max_attempts=2)  # fmt: skip
    rows = json.loads(root.read_text("out/rows.json"))
    assert rows[0] == {"q": "question 0", "a": "echo QUESTION 0 THEN ECHO QUESTION 0"}
    assert rows[1] == {"q": "question 1", "error": "llm_request_rejected"}
    assert rows[2] == {"q": "question 2", "error": "llm_batch_expired"}
    # question 1 and 2 went out twice (max_attempts=2), question 0's second hop once
    sent = [json.dumps(b) for b in server.batch_bodies]
    assert sum("question 1" in s for s in sent) == 2 and sum("question 2" in s for s in sent) == 2
    failures = [json.loads(root.read_bytes(root.rel(p))) for p in root.glob("cache/llm_batches/failed/*/*.json")]
    assert sorted(f["reason_code"] for f in failures) == ["llm_batch_expired", "llm_request_rejected"]
    assert all(len(f["batches"]) == 2 for f in failures)  # asked in two batches each, then given up
    assert any("scripted failure" in f["reason"] for f in failures)
    assert summary["answered"] == 1


def test_a_whole_expired_batch_fails_its_items_after_the_attempts(server, api_key, tmp_path):
    from datamind.storage import DataRoot

    server.expire_batches = True
    root = DataRoot(str(tmp_path / "batch"))
    summary = run_batched(two_step_shard(["a", "b"]), root, _client(server, api_key, root), "s", poll_s=0.01,
                          max_attempts=1)  # fmt: skip
    assert summary["answered"] == 0 and len(server.batches) == 1
    assert {r["error"] for r in json.loads(root.read_text("out/rows.json"))} == {"llm_batch_expired"}


def test_a_batch_is_found_again_by_its_metadata_and_never_submitted_twice(server, api_key, tmp_path):
    """A task killed between creating the batch and recording it: the rerun finds it at the endpoint."""
    from datamind.llm.batch import BatchStore, find_or_submit
    from datamind.storage import DataRoot

    root = DataRoot(str(tmp_path / "batch"))
    client = _client(server, api_key, root)
    store = BatchStore(root)
    reqs = {"ab" * 32: {"body": {"model": "fake-model", "messages": [{"role": "user", "content": "x"}]},
                        "template_version": "t@1", "sample_index": 0}}  # fmt: skip

    async def submit():
        try:
            return await find_or_submit(client._http(), store, "scope", reqs)
        finally:
            await client.aclose()

    first = asyncio.run(submit())
    root.remove("cache/llm_batches/submitted")  # the record never made it to disk
    second = asyncio.run(submit())
    assert second["batch_id"] == first["batch_id"] and len(server.batches) == 1


def test_the_real_pass_refuses_a_request_no_dry_pass_asked(server, api_key, tmp_path):
    from datamind.llm.batch import step
    from datamind.llm.errors import EndpointUnavailable
    from datamind.storage import DataRoot, ScratchRoot

    server.responder = _reply
    root = DataRoot(str(tmp_path / "batch"))
    client = _client(server, api_key, root)

    def fickle(r, c):  # asks something else when it writes for real: not deterministic given its answers
        q = "dry" if isinstance(r, ScratchRoot) else "real"
        res = run_all([c.chat("synthesizer", [{"role": "user", "content": q}], template_version="t@1")], client=c)
        if isinstance(res[0], LLMCallError):
            return {}
        return {"a": res[0].text}

    run_batched(lambda r, c: fickle(r, c) if isinstance(r, ScratchRoot) else {}, root, client, "s", poll_s=0.01)
    with pytest.raises(EndpointUnavailable, match="asked by no dry pass"):
        step(fickle, root, client, "s")
    assert not root.exists("out")


# Each way an endpoint's result line can be unusable: (how the line answering "question 1" is rewritten,
# whether the line still names its request, a phrase the recorded reason must hold).  A line that names no
# request of the batch is kept in the submission record; one that does fails its request.
_BAD_LINES = {
    "not JSON": (lambda row: json.dumps(row)[:40], False, "not JSON"),
    "nested past the parser's depth": (lambda row: "[" * 100_000 + "]" * 100_000, False, "not JSON"),
    "an array": (lambda row: json.dumps([row]), False, "JSON array, not an object"),
    "a string": (lambda row: json.dumps("answer"), False, "JSON string, not an object"),
    "custom_id an object": (lambda row: json.dumps({**row, "custom_id": {"id": row["custom_id"]}}), False,
                            "custom_id is a JSON object"),
    "custom_id missing": (lambda row: json.dumps({k: v for k, v in row.items() if k != "custom_id"}), False,
                          "no custom_id"),
    "custom_id a number": (lambda row: json.dumps({**row, "custom_id": 7}), False, "custom_id is a JSON number"),
    "custom_id unknown": (lambda row: json.dumps({**row, "custom_id": "f" * 64}), False,
                          "not a request of this batch"),
    "response an array": (lambda row: json.dumps({**row, "response": [row["response"]]}), True,
                          "response is a JSON array"),
    "error a string": (lambda row: json.dumps({**row, "response": None, "error": "boom"}), True,
                       "error is a JSON string"),
    "body not a completion": (lambda row: json.dumps({**row, "response": {**row["response"], "body": ["x"]}}), True,
                              "unusable answer"),
    "body without choices": (lambda row: json.dumps({**row, "response": {**row["response"], "body": {"id": 1}}}),
                             True, "unusable answer"),
}  # fmt: skip


def _first_hop_of(question: str, row: dict) -> bool:
    text = row["response"]["body"]["choices"][0]["message"]["content"]
    return text == "echo " + question.upper()


def _submissions(root) -> dict[str, dict]:
    docs = [json.loads(root.read_bytes(root.rel(p))) for p in root.glob("cache/llm_batches/submitted/*/*.json")]
    return {d["batch_id"]: d for d in docs}


def _failures(root) -> list[dict]:
    return [json.loads(root.read_bytes(root.rel(p))) for p in root.glob("cache/llm_batches/failed/*/*.json")]


@pytest.mark.parametrize("shape", list(_BAD_LINES))
def test_one_unusable_result_line_costs_only_itself_and_its_request_is_asked_again(server, api_key, tmp_path, shape):
    """The endpoint's first batch answers "question 1" with an unusable line: the rest of the batch is taken
    in, the line is recorded with its reason, its request goes out again and the shard completes."""
    from datamind.storage import DataRoot

    rewrite, names_request, reason = _BAD_LINES[shape]
    written: list[str] = []

    def once(row):  # only the first answer to question 1: the request asked again gets a good line
        if written or not _first_hop_of("question 1", row):
            return None
        written.append(rewrite(row))
        return written[0]

    server.responder = _reply
    server.batch_rewrite = once
    root = DataRoot(str(tmp_path / "batch"))
    questions = [f"question {i}" for i in range(3)]
    summary = run_batched(two_step_shard(questions), root, _client(server, api_key, root), "shard-b", poll_s=0.01)

    rows = json.loads(root.read_text("out/rows.json"))
    assert rows == [{"q": q, "a": f"echo {q.upper()} THEN ECHO {q.upper()}"} for q in questions]
    assert summary["answered"] == 3 and written
    sent = [b["messages"][-1]["content"] for b in server.batch_bodies]
    assert sent.count("question 1") == 2 and sent.count("question 0") == 1  # only the spoiled one went again
    first = _submissions(root)["batch_0001"]
    (failure,) = _failures(root)
    assert failure["batches"] == ["batch_0001"] and failure["reason_code"] == "llm_bad_response"
    if names_request:
        assert reason in failure["reason"] and first["bad_lines"] == []
        assert first["absorbed"]["failed"] == 1 and first["absorbed"]["answered"] == 2
    else:
        out_file = server.files[server.batches["batch_0001"]["output_file_id"]]["data"].decode().splitlines()
        (bad,) = first["bad_lines"]
        assert reason in bad["reason"] and bad["file"] == "output"
        assert bad["line"] == out_file.index(written[0]) + 1 and bad["excerpt"] == written[0][:300]
        assert first["absorbed"]["bad_lines"] == 1 and first["absorbed"]["answered"] == 2
        # the request it may have answered is missing from the output: failed, saying why, asked again
        assert "without a usable line" in failure["reason"] and "batch_0001" in failure["reason"]


def test_a_second_line_for_an_answered_request_is_recorded_and_the_first_answer_kept(server, api_key, tmp_path):
    from datamind.storage import DataRoot

    def twice(row):
        if not _first_hop_of("question 0", row):
            return None
        return json.dumps(row) + "\n" + json.dumps({**row, "response": {**row["response"], "body": {"x": 1}}})

    server.responder = _reply
    server.batch_rewrite = twice
    root = DataRoot(str(tmp_path / "batch"))
    summary = run_batched(two_step_shard(["question 0"]), root, _client(server, api_key, root), "s-d", poll_s=0.01)
    assert summary["answered"] == 1 and not _failures(root)
    (bad,) = _submissions(root)["batch_0001"]["bad_lines"]
    assert "a second line for request" in bad["reason"] and bad["line"] == 2


def test_a_request_whose_line_is_always_unusable_fails_its_item_with_the_reason(server, api_key, tmp_path):
    """Asked again up to the attempts, then its item is rejected with why; the others are written."""
    from datamind.storage import DataRoot

    server.responder = _reply
    server.batch_rewrite = lambda row: json.dumps([row]) if _first_hop_of("question 1", row) else None
    root = DataRoot(str(tmp_path / "batch"))
    summary = run_batched(two_step_shard(["question 0", "question 1"]), root, _client(server, api_key, root),
                          "s-a", poll_s=0.01, max_attempts=2)  # fmt: skip
    rows = json.loads(root.read_text("out/rows.json"))
    assert rows == [{"q": "question 0", "a": "echo QUESTION 0 THEN ECHO QUESTION 0"},
                    {"q": "question 1", "error": "llm_bad_response"}]  # fmt: skip
    assert summary["answered"] == 1
    (failure,) = _failures(root)
    assert len(failure["batches"]) == 2 and "without a usable line" in failure["reason"]
    kept = [line for d in _submissions(root).values() for line in d.get("bad_lines", [])]
    assert len(kept) == 2 and all("JSON array" in line["reason"] for line in kept)
