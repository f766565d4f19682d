"""The figures ``scripts/bench_llm_stages.py`` prints, computed against a real OpenAI-protocol server with prompt
caching: the raw rate leaves out the request that evaluates the prompt, a stage's evaluated prompt tokens are
those its endpoint did not answer from cache, and the ratio printed is the stage's rate over the raw rate."""

from __future__ import annotations

import asyncio
import re

import pytest
from script_modules import load_script

from datamind.llm import LLMClient, LLMConfig


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_llm_stages")


def _reply(words: int):
    return lambda body: "<answer>" + " ".join(f"w{i}" for i in range(words)) + "</answer>"


def test_the_raw_rate_sends_the_key_and_leaves_out_the_first_request(bench, server, api_key):
    server.responder, server.latency_s = _reply(20), 0.05
    raw = bench.raw_rate(server.base_url, "m", repeats=3, max_tokens=64, api_key=api_key)
    assert len(server.bodies) == 4 and len(raw["runs"]) == 3  # one warm-up, three measured
    assert raw["completion_tokens"] == 20
    assert 0 < raw["tokens_per_s"] <= 20 / 0.05  # at least the server's latency per request
    with pytest.raises(Exception, match="401"):  # an endpoint with a key refuses a request without it
        bench.raw_rate(server.base_url, "m", repeats=1, max_tokens=64)


def test_a_stage_counts_prompt_tokens_sent_cached_and_evaluated(bench, server, api_key, capsys):
    server.responder, server.prefix_cache, server.latency_s = _reply(10), True, 0.02
    config = LLMConfig(base_url=server.base_url, api_key=api_key, models={"expert": "m"}, max_retries=0)
    system = "You are an analyst. " + " ".join(f"rule{i}" for i in range(60))

    def stage(client: LLMClient) -> list[str]:
        async def ask(q: str):
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": q}]
            return (await client.chat("expert", msgs, template_version="t@1")).text

        async def all_three():  # one after another: each later prompt shares the system prompt with the first
            return [await ask(q) for q in ("first question", "second question", "third question")]

        return asyncio.run(all_three())

    fig = bench._measure("sampling", config, stage)
    assert fig["calls"] == 3 and fig["completion_tokens"] == 30
    assert fig["prompt_tokens_cached"] > 0  # the shared system prompt, twice
    assert fig["prompt_tokens_evaluated"] == fig["prompt_tokens_sent"] - fig["prompt_tokens_cached"]
    assert fig["tokens_per_s"] == pytest.approx(30 / fig["wall_s"])
    raw = {"tokens_per_s": fig["tokens_per_s"] * 2, "completion_tokens": 10, "runs": [1.0]}
    bench.report("m", raw, [fig])
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("sampling"))
    cells = row.split()
    assert float(cells[5]) == pytest.approx(0.5)  # x raw: half the raw rate
    assert re.fullmatch(r"\d+%", cells[-1]) and int(cells[-1][:-1]) == round(
        100 * fig["prompt_tokens_cached"] / fig["prompt_tokens_sent"]
    )
