"""``reports/index.html``: one page listing every quality report under the data root (newest first).

Rebuilt from the ``summary.json`` files each report writes, so it never drifts from what is on disk and can
be regenerated at any time (``rebuild_index(root)``); links are relative, so the page works opened from disk
and served from a bucket alike.
"""

from __future__ import annotations

import json
import posixpath
import re
from datetime import UTC, datetime
from urllib.parse import quote

from datamind.assets import DIRS
from datamind.stages import PIPELINE
from datamind.storage import DataRoot
from datamind.templating import render

REPORTS = DIRS["reports"]
INDEX = posixpath.join(REPORTS, "index.html")


def path_segment(value: str, what: str) -> str:
    """A value made safe as one path segment (Airflow run ids carry ':' and '+')."""
    seg = re.sub(r"[^A-Za-z0-9._-]+", "_", str(value)).strip("._")
    if not seg:
        raise ValueError(f"{what} {value!r} gives an empty path segment")
    return seg


def release_report(root: DataRoot, version_id: str, run_id: str | None) -> str | None:
    """The report folder (relative to reports/) of release ``version_id``, published by run ``run_id``; None
    when that run wrote no report naming it (a rerun that found the same release writes none)."""
    if not run_id:
        return None
    try:
        run_dir = path_segment(run_id, "run_id")
    except ValueError:
        return None
    for path in root.glob(REPORTS, "*", run_dir, "summary.json"):
        try:
            doc = json.loads(root.read_text(root.rel(path)))
        except (OSError, ValueError):
            continue
        if (doc.get("release") or {}).get("version_id") == version_id:
            return posixpath.relpath(posixpath.dirname(root.rel(path)), REPORTS)
    return None


def load_summaries(root: DataRoot) -> list[dict]:
    """Every report's summary.json, newest first; an unreadable one is listed as broken, never skipped. A
    release's report shows its promotion as the release's manifest records it now (``current_release``)."""
    out = []
    manifests: dict[int, dict | None] = {}
    for path in root.glob(REPORTS, "*", "*", "summary.json"):
        rel_dir = posixpath.dirname(root.rel(path))
        try:
            doc = current_release(root, json.loads(root.read_text(root.rel(path))), manifests)
        except (OSError, ValueError) as exc:
            doc = {"broken": f"{type(exc).__name__}: {exc}"}
        doc["_dir"] = posixpath.relpath(rel_dir, REPORTS)
        out.append(doc)
    out.sort(key=lambda d: (d.get("created_at") or "", d["_dir"]), reverse=True)
    return out


_VERSION_ID = re.compile(r"^v(\d+)$")


def current_release(root: DataRoot, doc: dict, manifests: dict[int, dict | None] | None = None) -> dict:
    """``doc`` (a report's summary.json) with its release's promotion as the release's manifest records it now.

    A release's report is written when it is published, ``awaiting_approval`` when it waits for a person; the
    decision lands in the manifest later. Every page that shows the report reads the decision from there, so
    none of them still says ``awaiting_approval`` after someone approved. ``manifests`` caches what was read."""
    release = doc.get("release")
    m = _VERSION_ID.match(str((release or {}).get("version_id") or ""))
    if not m:
        return doc
    from datamind.tables import read_manifest

    number = int(m.group(1))
    cache = {} if manifests is None else manifests
    if number not in cache:
        try:
            cache[number] = read_manifest(root, number)
        except (OSError, ValueError):
            cache[number] = None
    manifest = cache[number]
    if manifest is None or manifest.get("promotion") is None:
        return doc
    return {**doc, "release": {**release, "promotion": manifest["promotion"]}}


def refresh_release_reports(root: DataRoot, version_id: str) -> list[str]:
    """Rewrite the reports of release ``version_id`` (summary.json and report.html) with the promotion its
    manifest records now, then the index: the files on disk say what the UI says. Returns the report folders."""
    from datamind.quality.report_page import render_report

    done = []
    for doc in load_summaries(root):
        if "broken" in doc or (doc.get("release") or {}).get("version_id") != version_id:
            continue
        rel_dir = posixpath.join(REPORTS, doc.pop("_dir"))
        root.write_text(
            posixpath.join(rel_dir, "summary.json"), json.dumps(doc, indent=1, default=str, ensure_ascii=False)
        )
        validation_rel = posixpath.join(rel_dir, "validation.json")
        validation = json.loads(root.read_text(validation_rel)) if root.exists(validation_rel) else {}
        root.write_text(posixpath.join(rel_dir, "report.html"), render_report(doc, validation))
        done.append(rel_dir)
    if done:
        rebuild_index(root)
    return done


def _report(doc: dict) -> dict:
    d = doc["_dir"]
    if "broken" in doc:
        stage, run = (d.split("/") + ["", ""])[:2]
        return {"broken": doc["broken"], "stage": stage, "run_id": run}
    stats = doc.get("statistics") or {}
    release = doc.get("release")
    return {
        "broken": None,
        "created_at": doc.get("created_at", ""),
        "stage": doc.get("stage", ""),
        "run_id": doc.get("run_id", ""),
        "table": doc.get("table", ""),
        "n_rows": (doc.get("summary") or {}).get("n_rows", ""),
        "ok": bool(doc.get("success")),
        # a dataset release: its audit and promotion, beside the expectations
        "release": {
            "audit_pass": release.get("audit_verdict") == "pass",
            "version_id": release.get("version_id") or "",
            "state": (release.get("promotion") or {}).get("status") or "promoted",
            "promotion": release.get("promotion") or {},
        }
        if release
        else None,
        "passed": stats.get("successful_expectations", "?"),
        "evaluated": stats.get("evaluated_expectations", "?"),
        "links": [
            (quote(f"{d}/{target}"), label)
            for target, label in (
                ("report.html", "report"),
                ("data_docs/index.html", "Data Docs"),
                ("validation.json", "validation.json"),
                ("summary.json", "summary.json"),
            )
        ],
    }


def _stages(summaries: list[dict]) -> list[dict]:
    """One row per stage in pipeline order: what it reads and writes, and its latest report."""
    latest: dict[str, dict] = {}
    for doc in summaries:  # newest first; a report names its DAG (ingest reports are labelled per source)
        latest.setdefault((doc.get("origin") or {}).get("dag_id") or doc.get("stage", ""), doc)
    rows = []
    for stage in PIPELINE:
        doc = latest.get(stage.dag_id)
        shown = None
        if doc is not None:
            shown = {
                "broken": "broken" in doc,
                "ok": bool(doc.get("success")),
                "href": quote(doc["_dir"] + "/report.html"),
                "label": doc.get("run_id") or doc["_dir"],
            }
        rows.append(
            {"dag_id": stage.dag_id, "reads": stage.reads or "sources", "writes": stage.writes, "item": stage.item,
             "latest": shown}
        )  # fmt: skip
    return rows


def render_index(summaries: list[dict]) -> str:
    return render(
        "quality/index.html.j2",
        reports=[_report(s) for s in summaries],
        n_failing=sum(1 for s in summaries if not s.get("success")),
        now=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        stages=_stages(summaries),
    )


def rebuild_index(root: DataRoot) -> str:
    """Regenerate ``reports/index.html`` from every summary.json; returns its path."""
    return root.write_text(INDEX, render_index(load_summaries(root)))


def main(argv: list[str]) -> int:
    """``python -m datamind.quality.report_index [DATA_ROOT]``: regenerate the index by hand."""
    from datamind.settings import Settings

    root = DataRoot(argv[1] if len(argv) > 1 else Settings.from_env().data_root)
    print(rebuild_index(root))
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv))
