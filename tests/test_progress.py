"""Long tasks say how far they are at least every interval, and how they ended."""

from __future__ import annotations

import asyncio
import logging

from datamind.progress import progress_log


def test_progress_lines_come_on_a_timer_and_at_the_end(caplog):
    log = logging.getLogger("progress-test")

    async def main() -> None:
        async with progress_log(log, "sampling", total=4, interval_s=0.05) as progress:
            for ok in (True, False, True):
                await asyncio.sleep(0.06)
                progress.advance(ok)
            await asyncio.sleep(0.12)  # nothing finishes for a while: the ticker still reports
            progress.advance(True)

    with caplog.at_level(logging.INFO, logger="progress-test"):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) >= 5, lines
    assert any(line.startswith("sampling: 3/4 (75%)") and "failures 1" in line for line in lines[:-1])
    assert lines[-1].startswith("sampling: 4/4 (100%)") and lines[-1].endswith("(done)")
    assert "ETA" in lines[0]


def test_counted_items_are_tallied_as_they_end_and_the_gate_bounds_them():
    from datamind.progress import Progress, counted

    progress = Progress("items", total=4)
    running, peak = 0, 0

    async def item(value):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        if value == "boom":
            raise RuntimeError(value)
        return value

    async def main():
        gate = asyncio.Semaphore(2)
        return await asyncio.gather(
            *(counted(progress, item(v), lambda r: r != "bad", gate) for v in ("a", "bad", "boom", "b")),
            return_exceptions=True,
        )

    results = asyncio.run(main())
    assert results[:2] == ["a", "bad"] and isinstance(results[2], RuntimeError) and results[3] == "b"
    assert (progress.done, progress.failed) == (4, 2)  # the refused result and the exception
    assert peak == 2
