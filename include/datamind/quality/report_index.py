"""``reports/index.html``: one page listing every quality report under the data root (newest first).

Rebuilt from the ``summary.json`` files each report writes, so it never drifts from what is on disk and can
be regenerated at any time (``rebuild_index(root)``); links are relative, so the page works opened from disk
and served from a bucket alike.
"""

from __future__ import annotations

import html
import json
import posixpath
from datetime import UTC, datetime
from urllib.parse import quote

from datamind.assets import DIRS
from datamind.stages import PIPELINE
from datamind.storage import DataRoot

REPORTS = DIRS["reports"]
INDEX = posixpath.join(REPORTS, "index.html")

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;color:#222}
h1{font-size:1.4rem} h2{font-size:1.1rem;margin-top:1.5rem} p.meta{color:#666}
table{border-collapse:collapse;width:100%;font-size:.9rem}
th,td{border-bottom:1px solid #ddd;padding:.35rem .6rem;text-align:left;vertical-align:top}
th{background:#f4f4f4;position:sticky;top:0}
.pass{color:#176f2c;font-weight:600}.fail{color:#b3261e;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
"""


def load_summaries(root: DataRoot) -> list[dict]:
    """Every report's summary.json, newest first; an unreadable one is listed as broken, never skipped."""
    out = []
    for path in root.glob(REPORTS, "*", "*", "summary.json"):
        rel_dir = posixpath.dirname(root.rel(path))
        try:
            doc = json.loads(root.read_text(root.rel(path)))
        except (OSError, ValueError) as exc:
            doc = {"broken": f"{type(exc).__name__}: {exc}"}
        doc["_dir"] = posixpath.relpath(rel_dir, REPORTS)
        out.append(doc)
    out.sort(key=lambda d: (d.get("created_at") or "", d["_dir"]), reverse=True)
    return out


def _link(href: str, text: str) -> str:
    return f'<a href="{html.escape(quote(href))}">{html.escape(text)}</a>'


def _row(doc: dict) -> str:
    d = doc["_dir"]
    if "broken" in doc:
        stage, run = (d.split("/") + ["", ""])[:2]
        cells = ["", stage, run, "", ""]
        tds = "".join(f"<td>{html.escape(c)}</td>" for c in cells)
        problem = html.escape(doc["broken"])
        return f'<tr>{tds}<td><span class="fail">UNREADABLE</span></td><td>{problem}</td><td></td></tr>'
    stats = doc.get("statistics") or {}
    ok = bool(doc.get("success"))
    links = " · ".join(
        _link(f"{d}/{target}", label)
        for target, label in (
            ("report.html", "report"),
            ("data_docs/index.html", "Data Docs"),
            ("validation.json", "validation.json"),
            ("summary.json", "summary.json"),
        )
    )
    n_rows = (doc.get("summary") or {}).get("n_rows", "")
    cells = [
        ("", doc.get("created_at", "")),
        ("", doc.get("stage", "")),
        ("", doc.get("run_id", "")),
        ("", doc.get("table", "")),
        ("num", n_rows),
    ]
    verdict = f'<span class="{"pass" if ok else "fail"}">{"PASS" if ok else "FAIL"}</span>'
    release = doc.get("release")
    if release:  # a dataset release: its audit and promotion, beside the expectations
        audit = release.get("audit_verdict") == "pass"
        state = (release.get("promotion") or {}).get("status") or "promoted"
        verdict += (
            f' · audit <span class="{"pass" if audit else "fail"}">{"pass" if audit else "miss"}</span>'
            f" · {html.escape(release.get('version_id') or '')} {html.escape(state)}"
        )
    passed = f"{stats.get('successful_expectations', '?')}/{stats.get('evaluated_expectations', '?')} passed"
    tds = "".join(f'<td class="{cls}">{html.escape(str(v))}</td>' for cls, v in cells)
    return f"<tr>{tds}<td>{verdict}</td><td>{html.escape(passed)}</td><td>{links}</td></tr>"


def _pipeline(summaries: list[dict]) -> str:
    """One row per stage in pipeline order: what it reads and writes, and its latest report."""
    latest: dict[str, dict] = {}
    for doc in summaries:  # newest first; a report names its DAG (ingest reports are labelled per source)
        latest.setdefault((doc.get("origin") or {}).get("dag_id") or doc.get("stage", ""), doc)
    rows = []
    for stage in PIPELINE:
        doc = latest.get(stage.dag_id)
        if doc is None:
            last = "no report yet"
        elif "broken" in doc:
            last = '<span class="fail">UNREADABLE</span>'
        else:
            verdict = "PASS" if doc.get("success") else "FAIL"
            css = "pass" if doc.get("success") else "fail"
            last = (
                f'<span class="{css}">{verdict}</span> '
                f"{_link(doc['_dir'] + '/report.html', doc.get('run_id') or doc['_dir'])}"
            )
        reads = stage.reads or "sources"
        rows.append(
            f"<tr><td>{html.escape(stage.dag_id)}</td><td>{html.escape(reads)} &rarr; {html.escape(stage.writes)}"
            f"</td><td>{html.escape(stage.item)}</td><td>{last}</td></tr>"
        )
    return (
        "<h2>Pipeline</h2>\n<table><thead><tr><th>stage</th><th>reads &rarr; writes</th><th>item</th>"
        "<th>latest report</th></tr></thead><tbody>\n" + "\n".join(rows) + "\n</tbody></table>\n<h2>All reports</h2>\n"
    )


def render_index(summaries: list[dict]) -> str:
    n_fail = sum(1 for s in summaries if not s.get("success"))
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    head = (
        "<tr><th>created</th><th>stage</th><th>run</th><th>table</th><th>rows</th><th>result</th>"
        "<th>expectations</th><th>open</th></tr>"
    )
    body = "\n".join(_row(s) for s in summaries) or '<tr><td colspan="8">no reports yet</td></tr>'
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>DATAMIND data quality reports</title>"
        f"<style>{_STYLE}</style></head><body>\n"
        "<h1>DATAMIND data quality reports</h1>\n"
        f'<p class="meta">{len(summaries)} report(s), {n_fail} failing. Regenerated {html.escape(now)}.</p>\n'
        f"{_pipeline(summaries)}"
        f"<table><thead>{head}</thead><tbody>\n{body}\n</tbody></table>\n</body></html>\n"
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
