"""``report.html``: one quality report as a single self-contained page (inline CSS and SVG, no script, no CDN).

What a data engineer opens after a run: the verdict, the stage's counts in and out, rejections by reason
with examples, every distribution the summary holds as a bar chart, category x hop as a heat map, per-column
histograms, and each Great Expectations expectation with what it observed. It is rendered from the report's
``summary.json`` and ``validation.json`` alone, so it works from disk, from a bucket and inside the Airflow UI.

This module turns the JSON into what the page shows (chart geometry included); the markup is in
``templates/report.html.j2`` and ``templates/charts.html.j2``, rendered with every value escaped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from datamind.quality.viewer_links import FROM_REPORT, Links
from datamind.templating import render, render_macro

_BAR = "#4c78a8"
_MAX_BARS = 24


def _bars(data: Mapping[str, int | float], width: int = 460, label_width: int = 190) -> dict[str, Any]:
    """Horizontal bars, one per key (at most 24), scaled to the largest value."""
    items = list(data.items())[:_MAX_BARS]
    top = max((float(v) for _, v in items), default=0.0) or 1.0
    row, span = 18, width - label_width - 60
    bars = [
        {"label": str(label), "value": value, "y": i * row, "width": max(0.0, float(value)) / top * span}
        for i, (label, value) in enumerate(items)
    ]
    return {"bars": bars, "width": width, "height": len(items) * row + 4, "label_x": label_width - 6,
            "bar_x": label_width, "bar_height": row - 6, "colour": _BAR}  # fmt: skip


def bar_chart(data: Mapping[str, int | float], *, width: int = 460, label_width: int = 190) -> str:
    """Horizontal bars as inline SVG, each labelled with its value."""
    return render_macro("quality/charts.html.j2", "bar_chart", _bars(data, width, label_width))


def _grid(grid: Mapping[str, Mapping[str, int]], cell: int = 34, label_width: int = 230) -> dict[str, Any]:
    rows = list(grid.items())
    cols = list(rows[0][1].keys()) if rows else []
    top = max((v for _, r in rows for v in r.values()), default=0) or 1
    return {
        "columns": [{"name": c, "x": label_width + j * cell + cell / 2} for j, c in enumerate(cols)],
        "rows": [
            {
                "name": name,
                "y": 18 + i * 22,
                "cells": [
                    {
                        "column": c,
                        "value": counts.get(c, 0),
                        "shade": 0.08 + 0.92 * counts.get(c, 0) / top if counts.get(c, 0) else 0.0,
                        "x": label_width + j * cell,
                        "text_x": label_width + j * cell + cell / 2 - 1,
                    }
                    for j, c in enumerate(cols)
                ],
            }
            for i, (name, counts) in enumerate(rows)
        ],
        "width": label_width + len(cols) * cell + 10,
        "height": 22 + len(rows) * 22,
        "label_x": label_width - 6,
        "cell_width": cell - 2,
        "colour": _BAR,
    }


def heat_map(grid: Mapping[str, Mapping[str, int]], *, cell: int = 34, label_width: int = 230) -> str:
    """Rows x columns of counts as inline SVG, darker for more (category x hop)."""
    return render_macro("quality/charts.html.j2", "heat_map", _grid(grid, cell, label_width))


def _histogram(hist: Mapping) -> dict[str, Any]:
    edges, counts = hist["edges"], hist["counts"]
    width, height, pad = 300, 120, 24
    top = max(counts) or 1
    bin_width = (width - 2 * pad) / len(counts)
    bins = []
    for i, n in enumerate(counts):
        h = (height - 2 * pad) * n / top
        bins.append({"x": pad + i * bin_width, "y": height - pad - h, "height": h, "count": n,
                     "low": format(edges[i], "g"), "high": format(edges[i + 1], "g")})  # fmt: skip
    return {"bins": bins, "width": width, "height": height, "pad": pad, "bin_width": bin_width - 1, "top": top,
            "low": format(edges[0], "g"), "high": format(edges[-1], "g"), "colour": _BAR}  # fmt: skip


def _counts(counts: Mapping) -> dict[str, list]:
    """A stage's counts: plain numbers, and one level of named numbers (e.g. rejections by reason)."""
    flat = [(k, v) for k, v in counts.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    nested = [
        (k, [(a, b) for a, b in v.items() if not isinstance(b, Mapping)])
        for k, v in counts.items()
        if isinstance(v, Mapping) and v
    ]
    return {"flat": flat, "nested": nested}


def _rejections(summary: Mapping) -> list[dict[str, Any]]:
    examples = summary.get("drop_examples") or {}
    return [
        {"stage": r.get("stage", ""), "reason_code": r["reason_code"], "count": r["count"],
         "examples": examples.get(r["reason_code"]) or []}
        for r in summary.get("drop_reasons") or []
    ]  # fmt: skip


def _shown(observed) -> str:
    if observed is None:
        return ""
    return (observed if isinstance(observed, str) else json.dumps(observed, default=str))[:300]


def _expectations(validation: Mapping) -> list[dict[str, Any]]:
    """Each expectation's result, failures first."""
    rows = []
    for r in (validation.get("validation") or validation).get("results") or []:
        cfg = r.get("expectation_config") or {}
        kwargs = cfg.get("kwargs") or {}
        res = r.get("result") or {}
        observed = res.get("observed_value")
        if observed is None and "unexpected_count" in res:
            observed = f"{res.get('unexpected_count')} unexpected ({res.get('unexpected_percent') or 0:.2f}%)"
            sample = res.get("partial_unexpected_list") or []
            if sample:
                observed += ": " + ", ".join(str(x)[:60] for x in sample[:5])
        rows.append(
            {
                "ok": bool(r.get("success")),
                "type": cfg.get("type") or cfg.get("expectation_type") or "",
                "column": kwargs.get("column") or kwargs.get("column_list") or "",
                "observed": _shown(observed),
            }
        )
    return sorted(rows, key=lambda row: row["ok"])


def render_report(doc: Mapping, validation: Mapping | None) -> str:
    """The page for one report (``doc``: its summary.json; ``validation``: its validation.json, if readable)."""
    summary = doc.get("summary") or {}
    stats = doc.get("statistics") or {}
    distributions = [
        (k.removeprefix("by_").replace("_", " "), _bars(v))
        for k, v in summary.items()
        if k.startswith("by_") and isinstance(v, Mapping) and v and all(not isinstance(x, Mapping) for x in v.values())
    ]
    reasons = summary.get("drop_reasons") or []
    consistency = summary.get("consistency")
    return render(
        "quality/report.html.j2",
        stage=doc.get("stage", ""),
        run_id=doc.get("run_id", ""),
        table=doc.get("table", ""),
        created_at=doc.get("created_at", ""),
        n_rows=summary.get("n_rows", 0),
        ok=bool(doc.get("success")),
        origin=doc.get("origin") or {},
        covered=doc.get("covers_runs") or [],
        release=doc.get("release"),
        links=Links(FROM_REPORT),
        passed=stats.get("successful_expectations", "?"),
        evaluated=stats.get("evaluated_expectations", "?"),
        counts=_counts(doc.get("counts") or {}),
        rejections=_rejections(summary),
        rejection_chart=_bars({f"{r.get('stage', '')}/{r['reason_code']}": r["count"] for r in reasons}),
        distributions=distributions,
        category_by_hop=_grid(summary["category_by_hop"]) if summary.get("category_by_hop") else None,
        histograms=[
            (col, h.get("nulls"), _histogram(h)) for col, h in (summary.get("column_histograms") or {}).items()
        ],
        consistency=_counts(consistency) if consistency else None,
        expectations=_expectations(validation or {}),
    )
