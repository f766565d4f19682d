"""``report.html``: one quality report as a single self-contained page (inline CSS and SVG, no script, no CDN).

What a data engineer opens after a run: the verdict, the stage's counts in and out, rejections by reason
with examples, every distribution the summary holds as a bar chart, category x hop as a heat map, per-column
histograms, and each Great Expectations expectation with what it observed. It is rendered from the report's
``summary.json`` and ``validation.json`` alone, so it works from disk, from a bucket and inside the Airflow UI.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping

from datamind.quality.viewer_links import FROM_REPORT, Links

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5rem 2rem;color:#1f2328;max-width:72rem}
h1{font-size:1.35rem;margin-bottom:.2rem} h2{font-size:1.1rem;margin-top:2rem;border-bottom:1px solid #ddd}
h3{font-size:.95rem;margin:1rem 0 .3rem} p.meta{color:#59636e;margin-top:0}
table{border-collapse:collapse;font-size:.88rem;margin:.4rem 0}
th,td{border-bottom:1px solid #e3e3e3;padding:.3rem .6rem;text-align:left;vertical-align:top}
th{background:#f6f8fa} td.num{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:600}
.grid{display:flex;flex-wrap:wrap;gap:1.5rem} figure{margin:0} figcaption{font-size:.85rem;color:#59636e}
code{font-size:.85em;background:#f6f8fa;padding:0 .2em}
svg text{font-family:inherit;font-size:11px;fill:#1f2328}
"""
_BAR = "#4c78a8"
_MAX_BARS = 24


def _e(value) -> str:
    return html.escape(str(value))


def _svg(width: float, height: float, parts: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">{"".join(parts)}</svg>'
    )


def bar_chart(data: Mapping[str, int | float], *, width: int = 460, label_width: int = 190) -> str:
    """Horizontal bars, one per key (at most 24), each labelled with its value."""
    items = list(data.items())[:_MAX_BARS]
    if not items:
        return "<p class='meta'>(empty)</p>"
    top = max((float(v) for _, v in items), default=0.0) or 1.0
    row, span = 18, width - label_width - 60
    parts = []
    for i, (label, value) in enumerate(items):
        y = i * row
        w = max(0.0, float(value)) / top * span
        text = label if len(label) <= 30 else label[:29] + "…"
        parts.append(
            f'<text x="{label_width - 6}" y="{y + 13}" text-anchor="end">{_e(text)}</text>'
            f'<rect x="{label_width}" y="{y + 3}" width="{w:.1f}" height="{row - 6}" fill="{_BAR}">'
            f"<title>{_e(label)}: {_e(value)}</title></rect>"
            f'<text x="{label_width + w + 4:.1f}" y="{y + 13}">{_e(value)}</text>'
        )
    return _svg(width, len(items) * row + 4, parts)


def heat_map(grid: Mapping[str, Mapping[str, int]], *, cell: int = 34, label_width: int = 230) -> str:
    """Rows x columns of counts, darker for more (category x hop)."""
    rows = list(grid.items())
    if not rows:
        return "<p class='meta'>(empty)</p>"
    cols = list(rows[0][1].keys())
    top = max((v for _, r in rows for v in r.values()), default=0) or 1
    parts = [
        f'<text x="{label_width + j * cell + cell / 2}" y="12" text-anchor="middle">hop {_e(c)}</text>'
        for j, c in enumerate(cols)
    ]
    for i, (name, counts) in enumerate(rows):
        y = 18 + i * 22
        parts.append(f'<text x="{label_width - 6}" y="{y + 14}" text-anchor="end">{_e(name)}</text>')
        for j, c in enumerate(cols):
            v = counts.get(c, 0)
            shade = 0.08 + 0.92 * v / top if v else 0.0
            parts.append(
                f'<rect x="{label_width + j * cell}" y="{y}" width="{cell - 2}" height="20" '
                f'fill="{_BAR}" fill-opacity="{shade:.2f}" stroke="#ddd"><title>{_e(name)}, hop {_e(c)}: {v}</title>'
                f'</rect><text x="{label_width + j * cell + cell / 2 - 1}" y="{y + 14}" text-anchor="middle">'
                f"{v or ''}</text>"
            )
    width, height = label_width + len(cols) * cell + 10, 22 + len(rows) * 22
    return _svg(width, height, parts)


def histogram(hist: Mapping) -> str:
    edges, counts = hist["edges"], hist["counts"]
    width, height, pad = 300, 120, 24
    top = max(counts) or 1
    bw = (width - 2 * pad) / len(counts)
    parts = []
    for i, n in enumerate(counts):
        h = (height - 2 * pad) * n / top
        parts.append(
            f'<rect x="{pad + i * bw:.1f}" y="{height - pad - h:.1f}" width="{bw - 1:.1f}" height="{h:.1f}" '
            f'fill="{_BAR}"><title>[{edges[i]:g}, {edges[i + 1]:g}): {n}</title></rect>'
        )
    parts.append(f'<text x="{pad}" y="{height - 6}">{edges[0]:g}</text>')
    parts.append(f'<text x="{width - pad}" y="{height - 6}" text-anchor="end">{edges[-1]:g}</text>')
    parts.append(f'<text x="{pad}" y="12">max {top}</text>')
    return _svg(width, height, parts)


def _nulls(hist: Mapping) -> str:
    return f" ({hist['nulls']} null)" if hist.get("nulls") else ""


def _counts_table(counts: Mapping) -> str:
    flat = [(k, v) for k, v in counts.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    nested = [(k, v) for k, v in counts.items() if isinstance(v, Mapping) and v]
    if not flat and not nested:
        return "<p class='meta'>The stage reported no counts.</p>"
    rows = "".join(f"<tr><th>{_e(k)}</th><td class='num'>{_e(v)}</td></tr>" for k, v in flat)
    for k, v in nested:
        inner = ", ".join(f"{_e(a)}: {_e(b)}" for a, b in v.items() if not isinstance(b, Mapping))
        rows += f"<tr><th>{_e(k)}</th><td>{inner}</td></tr>"
    return f"<table>{rows}</table>"


def _rejections(summary: Mapping) -> str:
    reasons = summary.get("drop_reasons") or []
    if not reasons:
        return "<p class='meta'>Nothing was rejected.</p>"
    examples = summary.get("drop_examples") or {}
    rows = []
    for r in reasons:
        ex = examples.get(r["reason_code"]) or []
        shown = "".join(f"<div><code>{_e(x['item'])}</code> {_e(x['reason'])}</div>" for x in ex)
        rows.append(
            f"<tr><td>{_e(r.get('stage', ''))}</td><td><b>{_e(r['reason_code'])}</b></td>"
            f"<td class='num'>{_e(r['count'])}</td><td>{shown}</td></tr>"
        )
    chart = bar_chart({f"{r.get('stage', '')}/{r['reason_code']}": r["count"] for r in reasons})
    head = "<tr><th>stage</th><th>reason</th><th>count</th><th>examples</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>{chart}"


def _shown(observed) -> str:
    if observed is None:
        return ""
    return (observed if isinstance(observed, str) else json.dumps(observed, default=str))[:300]


def _expectations(validation: Mapping) -> str:
    results = (validation.get("validation") or validation).get("results") or []
    if not results:
        return "<p class='meta'>No expectation results recorded.</p>"
    rows = []
    for r in results:
        cfg = r.get("expectation_config") or {}
        kwargs = cfg.get("kwargs") or {}
        res = r.get("result") or {}
        observed = res.get("observed_value")
        if observed is None and "unexpected_count" in res:
            observed = f"{res.get('unexpected_count')} unexpected ({res.get('unexpected_percent') or 0:.2f}%)"
            sample = res.get("partial_unexpected_list") or []
            if sample:
                observed += ": " + ", ".join(str(x)[:60] for x in sample[:5])
        ok = r.get("success")
        rows.append(
            f"<tr><td class='{'pass' if ok else 'fail'}'>{'pass' if ok else 'FAIL'}</td>"
            f"<td>{_e(cfg.get('type') or cfg.get('expectation_type') or '')}</td>"
            f"<td>{_e(kwargs.get('column') or kwargs.get('column_list') or '')}</td>"
            f"<td>{_e(_shown(observed))}</td></tr>"
        )
    rows.sort(key=lambda row: "FAIL" not in row)
    head = "<tr><th>result</th><th>expectation</th><th>column</th><th>observed</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def audit_section(release: Mapping, links: Links | None) -> str:
    """A dataset release's audit (``release``: promotion.release_summary): the verdict, the promotion, every
    figure with its threshold, ok or miss, and for a miss links to the samples that count against it."""
    version = release.get("version_id") or ""
    p = release.get("promotion") or {}
    failing = release.get("failing_figures") or []
    verdict = (
        "<span class='pass'>every figure meets its threshold</span>"
        if not failing
        else f"<span class='fail'>misses {len(failing)}: {_e(', '.join(failing))}</span>"
    )
    state = p.get("status") or "promoted (published before promotion was recorded)"
    who = ""
    if p.get("decided_by"):
        who = f" by {_e(p['decided_by'])} ({_e(p.get('decided_at'))}): {_e(p.get('comment') or 'no comment')}"
    rows = []
    for v in release.get("audit") or []:
        mark = {True: "<span class='pass'>ok</span>", False: "<span class='fail'>miss</span>", None: "not judged"}
        shown = ""
        if v["ok"] is False and links is not None:
            shown = " ".join(f"<a href='{_e(links.sample(version, s))}'>{_e(s[:10])}</a>" for s in v["examples"])
        rows.append(
            f"<tr><td>{_e(v['name'])}</td><td class='num'>{_e(v['value'])}</td><td>{_e(v['op'])} {_e(v['bound'])}</td>"
            f"<td>{mark[v['ok']]}</td><td>{_e(v['meaning'])}</td><td>{shown}</td></tr>"
        )
    head = "<tr><th>figure</th><th>value</th><th>threshold</th><th></th><th>meaning</th><th>examples</th></tr>"
    viewer = f" · <a href='{_e(links.release(version))}'>browse its samples</a>" if links is not None else ""
    return (
        f"<h2>Release {_e(version)} audit: {verdict}</h2>"
        f"<p>Promotion: <b>{_e(state)}</b>{who} ({_e(p.get('reason') or 'no reason recorded')}){viewer}</p>"
        + (f"<table>{head}{''.join(rows)}</table>" if rows else "<p class='meta'>No audit figures.</p>")
        + _cost_section(release.get("cost") or {})
    )


def _cost_section(cost: Mapping) -> str:
    """What each accepted sample cost in LLM calls, by category x hop, and what the cache answered."""
    total = cost.get("total") or {}
    if not total:
        return ""
    if not total.get("prompt_tokens") and not total.get("completion_tokens"):
        return "<h3>LLM cost per accepted sample</h3><p class='meta'>No LLM call went into these samples.</p>"
    rows = "".join(
        f"<tr><td>{_e(k)}</td><td class='num'>{_e(c['samples'])}</td>"
        f"<td class='num'>{_e(c['paid_tokens_per_sample'])}</td>"
        f"<td class='num'>{_e(c['cached_tokens_per_sample'])}</td>"
        f"<td class='num'>{c['usd_per_sample']:.6f}</td></tr>"
        for k, c in (cost.get("by_category_hop") or {}).items()
    )
    note = "" if cost.get("priced") else " Some models have no configured price: their dollars are not counted."
    return (
        "<h3>LLM cost per accepted sample</h3>"
        f"<p>{_e(total['paid_tokens_per_sample'])} paid tokens and ${total['usd_per_sample']:.6f} per sample; the "
        f"cache answered {_e(total['cached_tokens_per_sample'])} tokens per sample (${total['saved_usd']:.4f} saved)."
        f"{_e(note)}</p><table><tr><th>category / hop</th><th>samples</th><th>paid tokens / sample</th>"
        f"<th>cached tokens / sample</th><th>USD / sample</th></tr>{rows}</table>"
    )


def render_report(doc: Mapping, validation: Mapping | None) -> str:
    """The page for one report (``doc``: its summary.json; ``validation``: its validation.json, if readable)."""
    summary = doc.get("summary") or {}
    stats = doc.get("statistics") or {}
    ok = bool(doc.get("success"))
    verdict = f'<span class="{"pass" if ok else "fail"}">{"PASS" if ok else "FAIL"}</span>'
    covered = doc.get("covers_runs") or []
    origin = doc.get("origin") or {}
    meta = [
        f"table <b>{_e(doc.get('table', ''))}</b>",
        f"run <code>{_e(doc.get('run_id', ''))}</code>",
        f"created {_e(doc.get('created_at', ''))}",
        f"{_e(summary.get('n_rows', 0))} rows validated",
    ]
    if origin:
        meta.append(f"task <code>{_e(origin.get('dag_id', ''))}.{_e(origin.get('task_id', ''))}</code>")
    if covered:
        meta.append(f"also covers rows of runs that never reported: {_e(', '.join(covered))}")
    sections = [
        f"<h1>{_e(doc.get('stage', ''))}: {verdict}</h1>",
        f"<p class='meta'>{' · '.join(meta)}</p>",
        *([audit_section(doc["release"], Links(FROM_REPORT))] if doc.get("release") else []),
        f"<p>{_e(stats.get('successful_expectations', '?'))} of {_e(stats.get('evaluated_expectations', '?'))} "
        "expectations passed. <a href='../../index.html'>All reports</a> · <a href='validation.json'>validation.json"
        "</a> · <a href='summary.json'>summary.json</a> · <a href='data_docs/index.html'>GX Data Docs (raw)</a></p>",
        "<h2>Counts in and out</h2>",
        _counts_table(doc.get("counts") or {}),
        "<h2>Rejections by reason</h2>",
        _rejections(summary),
    ]
    charts = [
        f"<figure><figcaption>{_e(k.removeprefix('by_').replace('_', ' '))}</figcaption>{bar_chart(v)}</figure>"
        for k, v in summary.items()
        if k.startswith("by_") and isinstance(v, Mapping) and v and all(not isinstance(x, Mapping) for x in v.values())
    ]
    if charts:
        sections += ["<h2>Distributions</h2>", f"<div class='grid'>{''.join(charts)}</div>"]
    if summary.get("category_by_hop"):
        sections += ["<h2>Category × hop</h2>", heat_map(summary["category_by_hop"])]
    hists = summary.get("column_histograms") or {}
    if hists:
        figs = "".join(
            f"<figure><figcaption>{_e(col)}{_nulls(h)}</figcaption>{histogram(h)}</figure>" for col, h in hists.items()
        )
        sections += ["<h2>Per-column distributions</h2>", f"<div class='grid'>{figs}</div>"]
    consistency = summary.get("consistency")
    if consistency:
        sections += ["<h2>Self-consistency</h2>", _counts_table(consistency)]
    sections += ["<h2>Great Expectations results</h2>", _expectations(validation or {})]
    title = f"{doc.get('stage', '')} · {doc.get('run_id', '')} · DATAMIND quality report"
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>\n" + "\n".join(sections) + "\n</body></html>\n"
    )
