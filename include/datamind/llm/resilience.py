"""Keeping a task productive against a busy or failing endpoint: AIMD concurrency, backoff, circuit breaker."""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from datamind.llm.errors import EndpointUnavailable


def backoff_delay(attempt: int, base_s: float, cap_s: float, rng: random.Random | None = None) -> float:
    """Exponential backoff with 'equal jitter': half the step is fixed, half random, so retries spread out
    but never collapse to zero and hammer a recovering server."""
    step = min(cap_s, base_s * (2**attempt))
    return step / 2 + (rng or random).uniform(0, step / 2)


class AdaptiveLimiter:
    """Bounds requests in flight; the bound halves on a 429 and creeps back by ~1 per window of successes.

    Additive increase / multiplicative decrease as in TCP: one burst of 429s (all the requests that were
    already in flight when the server started refusing) counts as one signal, because only requests that
    started after the last decrease (same ``epoch``) may decrease the limit again.  Waiters are served
    first come, first served.  Holds no loop-bound primitives, so one limiter survives several event loops.
    """

    def __init__(self, max_limit: int, min_limit: int = 1) -> None:
        if not 1 <= min_limit <= max_limit:
            raise ValueError("need 1 <= min_limit <= max_limit")
        self.max_limit = max_limit
        self.min_limit = min_limit
        self.limit = float(max_limit)
        self.in_flight = 0
        self.epoch = 0
        self.decreases = 0
        self.peak_in_flight = 0
        self._waiters: collections.deque[asyncio.Future] = collections.deque()

    @property
    def current_limit(self) -> int:
        return max(self.min_limit, int(self.limit))

    async def acquire(self) -> int:
        if not self._waiters and self.in_flight < self.current_limit:
            self._take()
            return self.epoch
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # the slot was granted just before the cancellation: hand it on
            else:
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass
            raise
        return self.epoch

    def release(self) -> None:
        self.in_flight -= 1
        self._wake()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[int]:
        epoch = await self.acquire()
        try:
            yield epoch
        finally:
            self.release()

    def on_success(self) -> None:
        if self.limit < self.max_limit:
            self.limit = min(float(self.max_limit), self.limit + 1.0 / self.limit)
            self._wake()

    def on_throttle(self, epoch: int) -> None:
        if epoch != self.epoch:
            return
        self.limit = max(float(self.min_limit), self.limit / 2)
        self.epoch += 1
        self.decreases += 1

    def _take(self) -> None:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def _wake(self) -> None:
        while self._waiters and self.in_flight < self.current_limit:
            fut = self._waiters.popleft()
            if not fut.done():
                self._take()
                fut.set_result(None)


class CircuitBreaker:
    """Opens after ``threshold`` consecutive transport failures (across all requests) and then fails every
    request at once with :class:`EndpointUnavailable`, so a dead endpoint ends the task in seconds instead of
    retrying every item.  After ``cooldown_s`` one more try is allowed (half-open); a success closes it.
    """

    def __init__(
        self,
        threshold: int,
        cooldown_s: float,
        *,
        endpoint: str,
        conn_id: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threshold = max(1, threshold)
        self.cooldown_s = cooldown_s
        self.endpoint = endpoint
        self.conn_id = conn_id
        self.clock = clock
        self.failures = 0
        self.last_failure = ""
        self.opened_at: float | None = None

    @property
    def is_open(self) -> bool:
        return self.opened_at is not None and self.clock() - self.opened_at < self.cooldown_s

    def check(self) -> None:
        if self.is_open:
            raise EndpointUnavailable(self.message())

    def record_success(self) -> None:
        self.failures = 0
        self.opened_at = None

    def record_failure(self, description: str) -> None:
        self.failures += 1
        self.last_failure = description
        half_open = self.opened_at is not None  # cooldown passed and the probe failed too
        if half_open or self.failures >= self.threshold:
            self.opened_at = self.clock()

    def message(self) -> str:
        where = f" (Airflow connection {self.conn_id!r})" if self.conn_id else ""
        return (
            f"LLM endpoint {self.endpoint}{where} is unavailable: {self.failures} consecutive failed requests, "
            f"last: {self.last_failure}. Check that the server is up and reachable from the worker; "
            f"the task stops instead of retrying every item."
        )
