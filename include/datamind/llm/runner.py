"""Driving async LLM work from a synchronous Airflow task."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING, TypeVar

from datamind.llm.errors import LLMCallError, ParseFailure

if TYPE_CHECKING:
    from datamind.llm.client import LLMClient

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)

# Failures that belong to one item: the caller records them as rejections and the batch goes on.
PER_ITEM_ERRORS: tuple[type[Exception], ...] = (LLMCallError, ParseFailure)


async def gather_all(
    aws: Iterable[Awaitable[T]],
    *,
    limit: int | None = None,
    capture: tuple[type[Exception], ...] = PER_ITEM_ERRORS,
) -> list[T | Exception]:
    """Await everything; results in input order, a ``capture``d failure returned in its item's slot.

    Any other exception - :class:`EndpointUnavailable` (no item can succeed) or a bug - cancels the rest and
    is raised, so a task never records a programming error as a rejection.  ``limit`` bounds how many
    awaitables run at once (the LLM client already bounds HTTP requests; this bounds the surrounding work,
    e.g. code execution between turns).
    """
    gate = asyncio.Semaphore(limit) if limit else None

    async def one(aw: Awaitable[T]) -> T | Exception:
        try:
            if gate is None:
                return await aw
            async with gate:
                return await aw
        except capture as exc:
            return exc

    tasks = [asyncio.ensure_future(one(aw)) for aw in aws]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def run_all(
    aws: Iterable[Awaitable[T]],
    *,
    limit: int | None = None,
    client: LLMClient | None = None,
    capture: tuple[type[Exception], ...] = PER_ITEM_ERRORS,
) -> list[T | Exception]:
    """Sync entry point: run :func:`gather_all` on a fresh event loop and return its list.

    Pass the ``client`` so its HTTP connections are closed on this loop and its usage summary is logged.
    Coroutines must be created for this call (an awaitable can be awaited once).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("run_all() was called inside a running event loop; use `await gather_all(...)` there")
    items = list(aws)

    async def main() -> list[T | Exception]:
        try:
            return await gather_all(items, limit=limit, capture=capture)
        finally:
            if client is not None:
                await client.aclose()
                client.usage.log_summary()

    try:
        return asyncio.run(main())
    finally:
        for aw in items:  # never-started coroutines (cancelled before their turn) must not warn at exit
            close = getattr(aw, "close", None)
            if close is not None and asyncio.iscoroutine(aw):
                close()
