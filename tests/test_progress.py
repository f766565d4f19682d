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
