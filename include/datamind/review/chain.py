"""One backfill across the chain: the ingest run, every stage run its Asset events woke (and the runs those
woke), each with its state, rows in and out, rejections by reason and report, and the release its samples
reached, with this source's files in it.

The orchestrator walks its own records (for Airflow: the ingest run's Asset events and the runs each event
created, ``datamind_airflow.chain``) and hands them here as plain dicts; this module decides what the page says.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from datamind.ids import safe_run_id
from datamind.quality.viewer_links import Links
from datamind.review.query import NOT_SELECTED
from datamind.templating import render

# What a finished run that announced nothing means: stages announce only new rows (runtime.announce).
_QUIET = {
    "success": "announced nothing: no new rows, so nothing after it was woken",
    "failed": "failed: see its log",
    "running": "still running",
    "queued": "queued",
}


def _stage_row(run: Mapping[str, Any]) -> dict[str, Any]:
    """What the page shows of one stage run: its counts summed over the Asset events it emitted."""
    events = run.get("events") or []
    rejected: Counter[str] = Counter()
    rows_in = rows_out = added = None
    for e in events:
        extra = e.get("extra") or {}
        if isinstance(extra.get("samples_added"), int):  # a release: its rows out are all its samples
            added = (added or 0) + extra["samples_added"]
        if isinstance(extra.get("rows_in"), int):
            rows_in = (rows_in or 0) + extra["rows_in"]
        if isinstance(extra.get("rows_out"), int):
            rows_out = (rows_out or 0) + extra["rows_out"]
        for reason, n in (extra.get("rejected") or {}).items():
            if isinstance(n, int):
                rejected[str(reason)] += n
    reports = [e["extra"]["report_url"] for e in events if (e.get("extra") or {}).get("report_url")]
    # the judge's trajectories that were fine but not the one kept for their query: counted, not a rejection
    not_selected = rejected.pop(NOT_SELECTED, 0)
    return {
        **{k: run.get(k) for k in ("dag_id", "run_id", "state", "start_date", "end_date", "run_href", "woken_by")},
        "rows_in": rows_in,
        "rows_out": rows_out,
        "added": added,
        "rejected": sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0])),
        "not_selected": not_selected,
        "report_href": reports[0] if reports else run.get("report_href"),
        "announced": [e.get("asset") for e in events],
        "note": None if events else _QUIET.get(str(run.get("state")), str(run.get("state"))),
    }


def release_of(run: Mapping[str, Any], releases: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The release a publish_dataset run wrote: the one its dataset event names, else the one whose manifest
    records the run (a release waiting at the review gate has announced nothing yet)."""
    named = {(e.get("extra") or {}).get("version") for e in run.get("events") or []}
    run_id = safe_run_id(run.get("run_id") or "")
    for r in releases:
        if r.get("version_id") in named or r.get("run_id") == run_id:
            return r
    return None


def chain_page(
    links: Links,
    walk: Mapping[str, Any],
    releases: list[Mapping[str, Any]],
    changes_of: Callable[[str], Mapping[str, Any] | None],
) -> str:
    """The page of one ingest run (``walk``: {"runs": [the ingest run first, then each run in the order it was
    woken], "source": its source name, "truncated": whether the walk stopped at its limit}); ``releases`` as
    ``query.releases`` lists them; ``changes_of(version_id)``: what changed in that release."""
    runs = list(walk.get("runs") or [])
    rows = [_stage_row(r) for r in runs]
    source = walk.get("source")
    reached = []
    for run in runs:
        if run.get("dag_id") != "publish_dataset":
            continue
        release = release_of(run, releases)
        if release is None:
            continue
        changes = changes_of(release["version_id"]) or {}
        mine = [r for r in changes.get("by_source") or [] if r.get("source") == source]
        files = [r for r in changes.get("by_file") or [] if r.get("source") == source]
        reached.append({"release": release, "changes": changes, "source_row": mine[0] if mine else None,
                        "files": files, "run_id": run.get("run_id")})  # fmt: skip
    first = runs[0] if runs else {}
    return render(
        "review/chain.html.j2",
        links=links,
        first=first,
        source=source,
        rows=rows,
        reached=reached,
        truncated=walk.get("truncated"),
        title=f"Backfill {first.get('dag_id', '')} {first.get('run_id', '')}",
    )
