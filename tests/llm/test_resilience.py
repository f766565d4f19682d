"""AIMD limiter, circuit breaker and backoff in isolation (deterministic clocks and RNGs)."""

from __future__ import annotations

import asyncio
import random

import pytest

from datamind.llm import AdaptiveLimiter, CircuitBreaker, EndpointUnavailable, backoff_delay


def test_limiter_halves_once_per_epoch_and_adds_back_about_one_per_window():
    lim = AdaptiveLimiter(max_limit=16, min_limit=2)
    stale_epoch = lim.epoch
    lim.on_throttle(stale_epoch)
    assert lim.current_limit == 8
    lim.on_throttle(stale_epoch)  # a second 429 from the same wave is the same signal
    assert lim.current_limit == 8 and lim.decreases == 1
    lim.on_throttle(lim.epoch)
    lim.on_throttle(lim.epoch)
    lim.on_throttle(lim.epoch)
    assert lim.current_limit == 2, "never below min_limit"
    # additive increase: +1/limit per success, so from 2 to 3 takes 2 successes (2 + 1/2 + 1/2.5 < 3 < ... )
    lim.on_success()
    assert lim.current_limit == 2
    lim.on_success()
    lim.on_success()
    assert lim.current_limit == 3
    for _ in range(1000):
        lim.on_success()
    assert lim.current_limit == 16, "never above max_limit"


def test_limiter_blocks_at_the_limit_serves_fifo_and_survives_cancellation():
    async def scenario():
        lim = AdaptiveLimiter(max_limit=2)
        order: list[int] = []
        await lim.acquire()
        await lim.acquire()

        async def waiter(i):
            async with lim.slot():
                order.append(i)
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(waiter(i)) for i in range(4)]
        await asyncio.sleep(0.01)
        assert order == [] and lim.in_flight == 2
        tasks[1].cancel()  # a cancelled waiter must not leak a slot
        lim.release()
        lim.release()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert order == [0, 2, 3] and lim.in_flight == 0 and lim.peak_in_flight == 2

    asyncio.run(scenario())


def test_breaker_opens_after_threshold_then_half_opens_after_cooldown():
    now = [0.0]
    br = CircuitBreaker(3, 10.0, endpoint="http://127.0.0.1:9/v1", conn_id="c", clock=lambda: now[0])
    br.record_failure("timeout")
    br.record_success()  # success resets the count
    for _ in range(2):
        br.record_failure("timeout")
    br.check()
    br.record_failure("connection refused")
    with pytest.raises(
        EndpointUnavailable, match=r"http://127.0.0.1:9/v1 \(Airflow connection 'c'\).*connection refused"
    ):
        br.check()
    now[0] = 10.5
    br.check()  # half-open: one probe may go
    br.record_failure("still down")
    with pytest.raises(EndpointUnavailable):
        br.check()
    now[0] = 21.0
    br.record_success()
    assert not br.is_open and br.failures == 0


@pytest.mark.parametrize("attempt", [0, 1, 3, 10])
def test_backoff_is_jittered_exponential_and_capped(attempt):
    rng = random.Random(7)
    step = min(5.0, 0.5 * 2**attempt)
    delays = [backoff_delay(attempt, 0.5, 5.0, rng) for _ in range(200)]
    assert all(step / 2 <= d <= step for d in delays)
    assert len({round(d, 6) for d in delays}) > 100, "retries must spread out"
