"""A flaky endpoint: the real client against a local OpenAI-protocol server failing 20% of requests in every
way a hosted endpoint does (429, 5xx, stalls past the timeout, dropped connections, broken JSON, an HTML page,
empty choices, replies cut at the token limit). Nothing wrong may become data, nothing may be lost or doubled,
and a later run against a healthy endpoint finishes what the faults interrupted. Prints its tally:

    pytest tests/rollout/test_rollout_faults.py -s
"""

from __future__ import annotations

import random
import threading
from collections import Counter

from fakes.openai_server import Fault
from rollout.corpus import build_corpus, expected, queries
from test_rollout_llm_e2e import fake_models

from datamind.agent.params import RolloutParams
from datamind.assets import DIRS
from datamind.judge.params import JudgeParams
from datamind.judge.stage import plan_judging
from datamind.llm import LLMClient, LLMConfig, ResponseCache
from datamind.rollout.stage import REJECTIONS_DIR, plan_sampling, sample_shard, sampling_state
from datamind.schemas import REJECTIONS, TRAJECTORIES
from datamind.shards import read_rows
from datamind.vocabulary import TRANSIENT_LLM_ERRORS

ROLLOUT = RolloutParams(backend="llm", n_samples=3, max_turns=5, max_attempts=3, concurrency=8)
N_QUERIES = 8


class Flaky:
    """Wraps a responder: each request fails with probability ``rate``, in one of the listed ways."""

    def __init__(self, inner, rate: float, seed: int) -> None:
        self.inner, self.rate, self.rng = inner, rate, random.Random(seed)
        self.lock = threading.Lock()
        self.served: Counter = Counter()

    def __call__(self, body: dict):
        with self.lock:
            roll, pick = self.rng.random(), self.rng.randrange(9)
        reply = self.inner(body)
        if roll >= self.rate:
            return reply
        fault = [
            Fault.rate_limit(0.01),
            Fault.server_error(500),
            Fault.server_error(503),
            Fault.hang(3.0),
            Fault.disconnect(),
            Fault.malformed(),
            Fault.garbage(),
            Fault.empty_choices(),
            Fault.cut(reply),
        ][pick]
        self.served[fault.kind] += 1
        return fault


def _corpus_queries() -> list[dict]:
    base = next(q for q in queries() if q["query_id"] == "q1")
    # Distinct questions, so every query makes its own requests (the cache is keyed by content).
    return [{**base, "query_id": f"f{i}", "question": f"{base['question']} (count {i})"} for i in range(N_QUERIES)]


def _client(server, root, timeout_s: float) -> LLMClient:
    config = LLMConfig(
        base_url=server.base_url,
        api_key="sk-test-not-a-secret",
        models={"expert": "expert-model", "judge": "judge-model"},
        timeout_s=timeout_s,
        max_retries=1,
        backoff_base_s=0.005,
        backoff_max_s=0.02,
        breaker_threshold=1000,  # this test is about per-item faults, not a dead endpoint
    )
    return LLMClient(config, cache=ResponseCache(root))


def _sample_everything(root, server, sandbox, timeout_s: float) -> list[dict]:
    summaries = []
    for spec in plan_sampling(root, 4, ROLLOUT):
        client = _client(server, root, timeout_s)
        summaries.append(sample_shard(root, spec, ROLLOUT, "run-faults", llm_client=client, sandbox=sandbox))
    return summaries


def test_twenty_percent_faults_lose_nothing_and_a_healthy_rerun_finishes(root, tmp_path, server, sandbox):
    build_corpus(root, str(tmp_path), _corpus_queries())
    flaky = Flaky(fake_models, 0.2, seed=7)
    server.responder = flaky
    truth = f"The result is {expected()['q1']}."
    _sample_everything(root, server, sandbox, timeout_s=1.0)
    assert sum(flaky.served.values()) >= 5, flaky.served

    rows = read_rows(root, TRAJECTORIES, DIRS["trajectories"])
    rejected = read_rows(root, REJECTIONS, REJECTIONS_DIR)
    tally = Counter()
    for r in rows:
        if r["status"] == "answered":
            # A reply cut inside <answer> ("The result is 10" for 1080) must never be an answer.
            assert r["final_answer"] == truth, r["final_answer"]
            tally["answered correctly"] += 1
        else:
            assert r["status"] == "error" and r["error"], r
            tally[f"error: {r['error'].split(':', 1)[0]}"] += 1
    seen = {r["query_id"] for r in rows} | {r["query_id"] for r in rejected}
    lost = {f"f{i}" for i in range(N_QUERIES)} - seen
    doubled = [k for k, n in Counter((r["query_id"], r["sample_index"]) for r in rows).items() if n > 1]
    print(f"\nfaults served (run 1): {dict(flaky.served)}")
    print(f"fault-injection tally, run 1: {dict(tally)}, lost {len(lost)}, duplicated {len(doubled)}")
    assert not lost and not doubled

    state = sampling_state(root)
    transient = {
        (r["query_id"], r["sample_index"])
        for r in rows
        if r["status"] == "error" and r["error"].split(":", 1)[0] in TRANSIENT_LLM_ERRORS
    }
    assert {(q, i) for q, idx in state.resample.items() for i in idx} == transient
    # Queries still waiting for a re-sample are not judged yet; the others are.
    judgeable = {q for spec in plan_judging(root, 100, JudgeParams()) for q in spec["query_ids"]}
    assert judgeable == {f"f{i}" for i in range(N_QUERIES)} - set(state.resample)

    # Healthy endpoint: the next run re-samples exactly the transient failures, nothing else.
    server.responder = fake_models
    before = server.request_count
    specs = plan_sampling(root, 4, ROLLOUT)
    planned = {(q, i) for s in specs for q, idx in s.get("resample", {}).items() for i in idx}
    assert planned == transient and all("resample" in s for s in specs)
    _sample_everything(root, server, sandbox, timeout_s=5.0)
    final = sampling_state(root)
    assert final.resample == {} and plan_sampling(root, 4, ROLLOUT) == []
    latest = {}
    for r in read_rows(root, TRAJECTORIES, DIRS["trajectories"]):
        key = (r["query_id"], r["sample_index"])
        if key not in latest or r["created_at"] > latest[key]["created_at"]:
            latest[key] = r
    assert len(latest) == N_QUERIES * 3
    redone = Counter(latest[k]["status"] for k in transient)
    assert redone == Counter({"answered": len(transient)})
    print(
        f"fault-injection tally, run 2: re-sampled {len(transient)} trajectories with "
        f"{server.request_count - before} requests; all answered"
    )


def test_attempts_are_bounded(root, tmp_path, server, sandbox):
    build_corpus(root, str(tmp_path), _corpus_queries()[:1])
    server.responder = lambda body: Fault.server_error(503)
    for attempt in range(1, 4):
        specs = plan_sampling(root, 4, ROLLOUT)
        assert len(specs) == 1, attempt
        _sample_everything(root, server, sandbox, timeout_s=1.0)
    # Three attempts recorded for each trajectory; the fourth run plans nothing and the judge takes it as is.
    rows = read_rows(root, TRAJECTORIES, DIRS["trajectories"])
    assert Counter((r["query_id"], r["sample_index"]) for r in rows) == {("f0", i): 3 for i in range(3)}
    assert plan_sampling(root, 4, ROLLOUT) == []
    assert [s["query_ids"] for s in plan_judging(root, 100, JudgeParams())] == [["f0"]]
