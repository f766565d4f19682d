"""LLMClient against a real HTTP server speaking the OpenAI protocol, with scripted faults."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time

import pytest
from fakes.openai_server import Fault

from datamind.llm import (
    EndpointUnavailable,
    LLMCallError,
    LLMClient,
    ParseFailure,
    Price,
    ResponseCache,
    extract_tag,
    rejection_row,
    run_all,
)
from datamind.schemas import REJECTIONS

TV = "test-v1"


def ask(text: str) -> list[dict]:
    return [{"role": "system", "content": "Answer in <answer> tags."}, {"role": "user", "content": text}]


def echo(body: dict) -> str:
    return f"<answer>{body['messages'][-1]['content']}</answer>"


def one(client: LLMClient, coro_factory):
    """Run one coroutine built inside the loop, closing the client's connections after."""
    return run_all([coro_factory()], client=client)[0]


# -- plain calls ------------------------------------------------------------------------------------
def test_chat_returns_text_usage_and_sends_role_model_and_params(server, make_client):
    server.responder = echo
    client = make_client(params={"expert": {"temperature": 0.7}})
    res = one(client, lambda: client.chat("expert", ask("one two three"), template_version=TV,
                                          params={"max_tokens": 50, "top_k": 5}))  # fmt: skip
    assert res.text == "<answer>one two three</answer>"
    # words: "Answer in <answer> tags." = 4, "one two three" = 3; reply "<answer>one two three</answer>" = 3
    assert (res.prompt_tokens, res.completion_tokens) == (7, 3)
    assert res.model == "expert-model" and res.cached is False and res.latency_s > 0
    body = server.bodies[0]
    assert body["model"] == "expert-model"
    assert body["temperature"] == 0.7 and body["max_tokens"] == 50 and body["top_k"] == 5
    assert body["messages"] == ask("one two three")


def test_prompt_tokens_the_endpoint_cached_are_counted_per_call_and_per_stage(server, make_client):
    """An endpoint with prompt caching says how many prompt tokens it did not read again
    (usage.prompt_tokens_details.cached_tokens); the client keeps it per call and the stage's meter sums it."""
    server.responder, server.prefix_cache = echo, True
    client = make_client(cache=False)
    shared = "Answer in <answer> tags. " + " ".join(f"rule{i}" for i in range(40))
    msgs = [[{"role": "system", "content": shared}, {"role": "user", "content": q}] for q in ("first ask", "second")]
    first, second = (one(client, lambda m=m: client.chat("expert", m, template_version=TV)) for m in msgs)
    assert (first.endpoint_cached_tokens, second.endpoint_cached_tokens) == (0, 44)  # the system prompt's words
    snap = client.usage.snapshot()
    assert snap["prompt_tokens"] == 46 + 45 and snap["endpoint_cached_prompt_tokens"] == 44
    assert "endpoint-cached 44" in client.usage.summary()


def test_a_wrong_key_is_refused_by_the_server_and_fails_the_task(server, make_client):
    client = make_client(api_key="sk-wrong")
    with pytest.raises(EndpointUnavailable, match="API key") as info:
        run_all([client.chat("expert", ask("q"), template_version=TV)], client=client)
    assert "sk-wrong" not in str(info.value)
    assert server.request_count == 0  # refused at the door, before the completions handler


def test_invalid_requests_fail_before_any_http(server, make_client):
    client = make_client()

    async def bad(**kw):
        args = dict(role="judge", messages=ask("x"), template_version=TV)
        args.update(kw)
        return await client.chat(args.pop("role"), args.pop("messages"), **args)

    cases = [
        dict(template_version=""),
        dict(messages=[]),
        dict(messages=[{"role": "robot", "content": "x"}]),
        dict(messages=[{"role": "user", "content": None}]),
        dict(params={"n": 3}),
        dict(role="critic"),
    ]
    results = run_all([bad(**c) for c in cases], client=client, capture=(ValueError,))
    assert all(isinstance(r, ValueError) for r in results), results
    assert server.request_count == 0


def test_rerun_makes_zero_new_calls(server, make_client, root):
    server.responder = echo
    prompts = [ask(f"question {i}") for i in range(20)]

    def batch(client):
        return run_all([client.chat("synthesizer", p, template_version=TV) for p in prompts], client=client)

    first_client = make_client()
    first = batch(first_client)
    assert server.request_count == 20 and not any(r.cached for r in first)
    # a rerun is a new process: a new client over the same data root
    again_client = LLMClient(first_client.config, cache=ResponseCache(root))
    again = batch(again_client)
    assert server.request_count == 20, "a rerun must not pay for any call twice"
    assert all(r.cached for r in again)
    assert [r.text for r in again] == [r.text for r in first]
    assert [(r.prompt_tokens, r.completion_tokens) for r in again] == [
        (r.prompt_tokens, r.completion_tokens) for r in first
    ]
    assert (again_client.usage.calls, again_client.usage.cached_calls) == (0, 20)


def test_the_api_key_never_reaches_cache_files_or_logs(server, make_client, root, api_key, caplog):
    server.script(Fault.server_error(500))
    client = make_client()
    with caplog.at_level(logging.DEBUG):
        run_all([client.chat("expert", ask(f"k{i}"), template_version=TV) for i in range(3)], client=client)
    assert ResponseCache(root).count() == 3
    for dirpath, _, files in os.walk(root.root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as fh:
                assert api_key.encode() not in fh.read()
    assert caplog.records and api_key not in caplog.text


def test_new_template_version_or_sample_index_is_a_new_call(server, make_client):
    client = make_client()
    msgs = ask("same prompt")
    run_all([client.chat("expert", msgs, template_version="v1", sample_index=i) for i in range(3)], client=client)
    assert server.request_count == 3, "each sample index is its own sample"
    run_all([client.chat("expert", msgs, template_version="v1", sample_index=i) for i in range(3)], client=client)
    assert server.request_count == 3
    run_all([client.chat("expert", msgs, template_version="v2")], client=client)
    assert server.request_count == 4, "a prompt template change must not be answered from the old cache"


def test_identical_requests_in_flight_are_sent_once(server, make_client):
    server.latency_s = 0.1
    client = make_client()
    results = run_all([client.chat("judge", ask("dup"), template_version=TV) for _ in range(5)], client=client)
    assert server.request_count == 1
    assert sorted(r.cached for r in results) == [False, True, True, True, True]
    assert client.usage.calls == 1 and client.usage.cached_calls == 4


def test_use_cache_false_always_calls(server, make_client, root):
    client = make_client()
    for _ in range(2):
        one(client, lambda: client.chat("judge", ask("x"), template_version=TV, use_cache=False))
    assert server.request_count == 2 and ResponseCache(root).count() == 0


# -- faults -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fault",
    [Fault.server_error(500), Fault.server_error(503), Fault.malformed(), Fault.empty_choices(), Fault.hang(5.0)],
    ids=["500", "503", "malformed-json", "empty-choices", "hang-past-timeout"],
)
def test_transient_faults_are_retried(server, make_client, fault):
    server.responder = echo
    server.script(fault, fault)
    client = make_client(timeout_s=0.3)
    t0 = time.perf_counter()
    res = one(client, lambda: client.chat("expert", ask("survive"), template_version=TV))
    assert res.text == "<answer>survive</answer>"
    assert server.request_count == 3
    assert client.usage.events["retry"] == 2
    assert time.perf_counter() - t0 < 3.0  # a hang costs one timeout each, not the server's 5 s


def test_retries_are_bounded_and_recorded_per_item(server, make_client):
    server.script(*[Fault.server_error(500)] * 4)
    client = make_client(max_retries=3)
    res = one(client, lambda: client.chat("expert", ask("doomed"), template_version=TV))
    assert isinstance(res, LLMCallError)
    assert res.reason_code == "llm_retries_exhausted" and "HTTP 500" in str(res)
    assert server.request_count == 4  # 1 try + 3 retries


def test_429_backs_off_honours_retry_after_and_recovers(server, make_client):
    server.responder = echo
    server.script(Fault.rate_limit(retry_after=0.2))
    client = make_client()
    t0 = time.perf_counter()
    res = one(client, lambda: client.chat("expert", ask("busy"), template_version=TV))
    assert res.text == "<answer>busy</answer>"
    assert time.perf_counter() - t0 >= 0.2
    assert server.request_count == 2 and client.usage.events["throttled"] == 1
    assert client.limiter.decreases == 1 and client.limiter.current_limit == 4  # 8 halved


def test_a_burst_of_429s_halves_the_limit_once_and_it_recovers(server, make_client):
    server.responder = echo
    # 50 ms lets all 8 requests of the first wave be sent before the first refusal comes back
    server.latency_s = 0.05
    server.script(*[Fault.rate_limit(retry_after=0.01)] * 8)  # every request of the first wave is refused
    client = make_client(max_concurrency=8)
    # from 4 back to 8 takes about 4 + 5 + 6 + 7 = 22 successes; 60 requests leave room
    results = run_all([client.chat("expert", ask(f"q{i}"), template_version=TV) for i in range(60)], client=client)
    assert all(r.text == f"<answer>q{i}</answer>" for i, r in enumerate(results))
    assert client.limiter.decreases == 1, "one overload signal must not collapse the limit"
    assert client.limiter.current_limit == 8, "the limit climbs back after successes"
    assert server.max_in_flight <= 8


def test_rate_limit_that_never_ends_is_an_item_error(server, make_client):
    server.script(*[Fault.rate_limit(retry_after=0.001)] * 3)
    client = make_client(max_throttle_retries=2)
    res = one(client, lambda: client.chat("expert", ask("x"), template_version=TV))
    assert isinstance(res, LLMCallError) and res.reason_code == "llm_rate_limited"


def test_concurrency_never_exceeds_the_configured_bound(server, make_client):
    server.latency_s = 0.05
    client = make_client(max_concurrency=4)
    run_all([client.chat("expert", ask(f"c{i}"), template_version=TV) for i in range(24)], client=client)
    assert server.max_in_flight == 4


def _dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connections are refused
    return port


def test_dead_endpoint_fails_the_task_fast_with_a_clear_error(make_client, api_key):
    client = make_client(base_url=f"http://127.0.0.1:{_dead_port()}/v1", breaker_threshold=5, max_retries=10)
    t0 = time.perf_counter()
    with pytest.raises(EndpointUnavailable) as info:
        run_all([client.chat("expert", ask(f"q{i}"), template_version=TV) for i in range(200)], client=client)
    assert time.perf_counter() - t0 < 2.0
    msg = str(info.value)
    assert client.config.base_url in msg and "5 consecutive failed requests" in msg and "connection" in msg.lower()
    assert api_key not in msg
    assert client.usage.events["retry"] < 20  # the breaker stopped the retries, not the per-item budget


def test_hung_endpoint_trips_the_breaker(server, make_client):
    server.script(*[Fault.hang(3.0)] * 10)
    client = make_client(timeout_s=0.2, breaker_threshold=3, max_concurrency=1, max_retries=10)
    with pytest.raises(EndpointUnavailable, match="timeout"):
        run_all([client.chat("expert", ask("q"), template_version=TV)], client=client)
    # Three failed attempts (the threshold) and no more, counted where they are made: on a loaded machine the
    # last one can time out before the server has read it.
    assert client.usage.events["retry"] == 3
    assert 2 <= server.request_count <= 3


@pytest.mark.parametrize(("status", "match"), [(401, "API key"), (403, "API key"), (404, "model 'expert-model'")])
def test_auth_and_missing_model_fail_the_task(server, make_client, api_key, status, match):
    server.script(Fault.http_status(status))
    client = make_client()
    with pytest.raises(EndpointUnavailable, match=match) as info:
        run_all([client.chat("expert", ask("q"), template_version=TV)], client=client)
    assert api_key not in str(info.value)
    assert server.request_count == 1


def test_bad_request_is_an_item_error_and_the_batch_continues(server, make_client):
    server.responder = lambda body: (
        Fault.http_status(400) if "too long" in body["messages"][-1]["content"] else echo(body)
    )
    client = make_client()
    results = run_all([client.chat("expert", ask(t), template_version=TV) for t in ("ok 1", "too long", "ok 2")],
                      client=client)  # fmt: skip
    assert results[0].text == "<answer>ok 1</answer>" and results[2].text == "<answer>ok 2</answer>"
    assert isinstance(results[1], LLMCallError) and results[1].status_code == 400
    assert results[1].reason_code == "llm_request_rejected"


# -- parsing ----------------------------------------------------------------------------------------
def parse_answer(text: str) -> str:
    return extract_tag(text, "answer")


def test_malformed_output_is_re_asked_with_feedback(server, make_client):
    replies = iter(["I think it is 4", "<answer>4</answer>"])
    server.responder = lambda body: next(replies)
    client = make_client()
    res = one(client, lambda: client.chat_parsed("synthesizer", ask("2+2?"), parse_answer, template_version=TV))
    assert res.value == "4" and res.attempts == 2 and not res.cached
    # prompt 4+1 words, then 4+1 + 5 (the bad reply) + the retry note; completions 5 + 1
    second = server.bodies[1]["messages"]
    assert second[-2] == {"role": "assistant", "content": "I think it is 4"}
    assert second[-1]["role"] == "user" and "no <answer>" in second[-1]["content"]
    note_words = len(second[-1]["content"].split())
    assert res.prompt_tokens == 5 + (5 + 5 + note_words)
    assert res.completion_tokens == 5 + 1


def test_parse_failure_carries_raw_text_and_reason_and_makes_a_rejection_row(server, make_client):
    server.responder = lambda body: "<answer>never closed"
    client = make_client()
    res = one(client, lambda: client.chat_parsed("synthesizer", ask("q"), parse_answer, template_version=TV,
                                                 max_parse_retries=2))  # fmt: skip
    assert isinstance(res, ParseFailure)
    assert res.raw == "<answer>never closed" and "never closed with </answer>" in res.reason
    assert res.attempts == 3 and server.request_count == 3 and len(res.raw_attempts) == 3
    row = rejection_row(res, item_id="q-1", stage="synth", run_id="r1", query_id="q-1")
    table = REJECTIONS.to_table([row])  # fits the declared rejections schema
    assert table.column("reason_code").to_pylist() == ["llm_parse_failed"]
    assert table.column("raw").to_pylist() == ["<answer>never closed"]


def test_parse_retries_without_feedback_still_ask_again(server, make_client):
    replies = iter(["garbage", "<answer>ok</answer>"])
    server.responder = lambda body: next(replies)
    client = make_client()
    res = one(client, lambda: client.chat_parsed("judge", ask("q"), parse_answer, template_version=TV, feedback=False))
    assert res.value == "ok" and res.attempts == 2
    assert server.bodies[0]["messages"] == server.bodies[1]["messages"]


def test_parsed_rerun_replays_from_cache_with_zero_calls(server, make_client, root):
    replies = iter(["nope", "<answer>yes</answer>"])
    server.responder = lambda body: next(replies)
    client = make_client()
    first = one(client, lambda: client.chat_parsed("judge", ask("q"), parse_answer, template_version=TV))
    rerun_client = LLMClient(client.config, cache=ResponseCache(root))
    again = one(rerun_client, lambda: rerun_client.chat_parsed("judge", ask("q"), parse_answer, template_version=TV))
    assert server.request_count == 2
    assert (again.value, again.attempts, again.cached) == (first.value, 2, True)
    assert (again.prompt_tokens, again.completion_tokens) == (first.prompt_tokens, first.completion_tokens)


def test_parser_bugs_are_not_swallowed_as_malformed_output(server, make_client):
    def buggy(text: str) -> str:
        raise KeyError("oops")

    client = make_client()
    with pytest.raises(KeyError, match="oops"):
        one(client, lambda: client.chat_parsed("judge", ask("q"), buggy, template_version=TV))
    assert server.request_count == 1


def test_a_bug_in_one_item_fails_the_batch_instead_of_becoming_a_rejection(server, make_client):
    server.latency_s = 0.05
    client = make_client()

    async def item(i):
        res = await client.chat("judge", ask(f"b{i}"), template_version=TV)
        if i == 2:
            raise TypeError("bug in the caller")
        return res

    with pytest.raises(TypeError, match="bug in the caller"):
        run_all([item(i) for i in range(6)], client=client)


# -- usage and cost ---------------------------------------------------------------------------------
def test_usage_and_cost_are_summed_per_task_and_logged(server, make_client, caplog):
    server.responder = lambda body: "a b c d"  # 4 completion tokens
    # $1 per M prompt tokens, $2 per M completion tokens for the judge model only
    client = make_client(prices={"judge-model": Price(1.0, 2.0)})
    prompts = [ask("x y"), ask("x y z")]  # 4+2 = 6 and 4+3 = 7 prompt tokens
    with caplog.at_level(logging.INFO, logger="datamind.llm"):
        results = run_all([client.chat("judge", p, template_version=TV) for p in prompts], client=client)
    assert [r.prompt_tokens for r in results] == [6, 7]
    assert results[0].cost_usd == pytest.approx((6 * 1 + 4 * 2) / 1e6)
    snap = client.usage.snapshot()
    assert (snap["calls"], snap["prompt_tokens"], snap["completion_tokens"]) == (2, 13, 8)
    assert snap["cost_usd"] == pytest.approx((13 * 1 + 8 * 2) / 1e6)
    summary = [r.getMessage() for r in caplog.records if "LLM usage" in r.getMessage()]
    assert summary and "2 calls" in summary[-1] and "prompt=13" in summary[-1] and "completion=8" in summary[-1]
    # an unpriced model reports no cost rather than a made-up zero
    expert = one(client, lambda: client.chat("expert", ask("x"), template_version=TV))
    assert expert.cost_usd is None


# -- driving from sync code -------------------------------------------------------------------------
def test_run_all_keeps_order_and_the_client_survives_several_loops(server, make_client):
    server.responder = echo
    server.latency_s = 0.01
    client = make_client()
    for round_ in range(2):
        results = run_all([client.chat("expert", ask(f"r{round_}-{i}"), template_version=TV) for i in range(10)],
                          client=client)  # fmt: skip
        assert [r.text for r in results] == [f"<answer>r{round_}-{i}</answer>" for i in range(10)]


def test_run_all_refuses_to_nest_in_a_running_loop():
    async def inner():
        async def noop():
            return 1

        coro = noop()
        try:
            run_all([coro])
        finally:
            coro.close()

    with pytest.raises(RuntimeError, match="gather_all"):
        asyncio.run(inner())


def test_run_all_limit_bounds_surrounding_work():
    active = peak = 0

    async def work(i):
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.005)
        active -= 1
        if i == 3:
            raise ValueError("item 3 is bad")
        return i

    results = run_all([work(i) for i in range(12)], limit=3, capture=(ValueError,))
    assert peak == 3
    assert results[:3] == [0, 1, 2] and isinstance(results[3], ValueError) and results[4:] == list(range(4, 12))


def test_a_reply_cut_at_max_tokens_is_reported_and_never_cached(server, make_client):
    server.responder = lambda body: "<think>long</think><answer>The result is 1080 units in total</answer>"
    client = make_client()
    res = one(client, lambda: client.chat("expert", ask("q"), template_version=TV, params={"max_tokens": 3}))
    assert res.finish_reason == "length" and "1080" not in res.text
    again = one(client, lambda: client.chat("expert", ask("q"), template_version=TV, params={"max_tokens": 3}))
    assert not again.cached and server.request_count == 2  # asked again: a cut reply is no cached success
