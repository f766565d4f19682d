"""Progress lines for long stage tasks: done/total, rate, ETA and failures so far, at least every 10 s.

    async with progress_log(log, "sampling", total=len(jobs)) as progress:
        ...; progress.advance(ok=True)

A ticker on the task's event loop writes the line even while every item is still running, so a task log never
goes silent for long; the last line says how it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

INTERVAL_S = 10.0


@dataclass
class Progress:
    what: str
    total: int
    done: int = 0
    failed: int = 0
    started: float = field(default_factory=time.monotonic)

    def advance(self, ok: bool = True) -> None:
        self.done += 1
        self.failed += not ok

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        left = self.total - self.done
        eta = f"{left / rate:.0f} s" if rate > 0 else "unknown"
        share = f"{100 * self.done / self.total:.0f}%" if self.total else "100%"
        return (
            f"{self.what}: {self.done}/{self.total} ({share}), {rate:.2f}/s, ETA {eta}, "
            f"failures {self.failed}, {elapsed:.0f} s elapsed"
        )


@contextlib.asynccontextmanager
async def progress_log(
    logger: logging.Logger, what: str, total: int, interval_s: float = INTERVAL_S
) -> AsyncIterator[Progress]:
    progress = Progress(what, total)

    async def tick() -> None:
        while True:
            await asyncio.sleep(interval_s)
            logger.info("%s", progress.line())

    ticker = asyncio.create_task(tick())
    try:
        yield progress
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
        logger.info("%s (done)", progress.line())


async def counted(
    progress: Progress,
    aw: Awaitable[T],
    ok: Callable[[T], bool] = lambda _: True,
    gate: asyncio.Semaphore | None = None,
) -> T:
    """Await one item (inside ``gate`` when given) and count it in ``progress``: failed when it raises or when
    ``ok`` says its result is a failure."""
    async with gate or contextlib.nullcontext():
        try:
            result = await aw
        except BaseException:
            progress.advance(ok=False)
            raise
        progress.advance(ok=ok(result))
        return result
