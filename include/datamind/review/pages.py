"""HTML of the sample viewer: releases, a page of samples with filters, one sample as a conversation, and
one run's trajectories and rejections. Self-contained pages (inline CSS, no script): every link is a plain
GET with the filters in its query string, so any page, a filtered list or one sample, can be pasted into a
ticket and opens the same view.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from typing import Any

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer, SqlLexer

from datamind.publish.promotion import release_summary
from datamind.quality.report_page import STYLE, audit_section
from datamind.quality.viewer_links import Links
from datamind.review.query import Page, Source
from datamind.rollout.protocol import interpreter_body, parse_turn, strip_code_fences

_EXTRA_STYLE = """
.turn{border-left:3px solid #d0d7de;margin:.8rem 0;padding:.2rem .8rem}.turn.assistant{border-color:#4c78a8}
.turn.tool{border-color:#8c959f;background:#f6f8fa}.turn.user{border-color:#1a7f37}
.role{font-size:.75rem;color:#59636e;text-transform:uppercase;letter-spacing:.04em}
.think{color:#444;font-style:italic;white-space:pre-wrap} pre{white-space:pre-wrap;margin:.3rem 0;font-size:.82rem}
.answer{font-weight:600;background:#dafbe1;padding:.2rem .5rem;display:inline-block}
form.filters{display:flex;flex-wrap:wrap;gap:.6rem;align-items:end;margin:.6rem 0}
form.filters label{display:flex;flex-direction:column;font-size:.8rem;color:#59636e}
.pager a,.pager span{margin-right:.6rem} .miss{color:#cf222e;font-weight:600}.ok{color:#1a7f37;font-weight:600}
.status{padding:.1rem .4rem;border-radius:.3rem;background:#f6f8fa}
"""
_FORMATTER = HtmlFormatter(noclasses=True, nowrap=False, style="default")
_SQL_CALL = re.compile(r"execute_sql\(\s*(?:sql\s*=\s*)?(['\"]{1,3})(.*?)\1", re.DOTALL)


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _page(title: str, body: list[str], crumbs: list[tuple[str, str]]) -> str:
    trail = " › ".join(f"<a href='{_e(href)}'>{_e(label)}</a>" if href else _e(label) for label, href in crumbs)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)} · DataMind sample viewer</title><style>{STYLE}{_EXTRA_STYLE}</style></head><body>\n"
        f"<p class='meta'>{trail}</p>\n" + "\n".join(body) + "\n</body></html>\n"
    )


# -- conversation ------------------------------------------------------------------------------------
def _code_html(code: str) -> str:
    body = strip_code_fences(code)
    out = highlight(body, PythonLexer(), _FORMATTER)
    for m in _SQL_CALL.finditer(body):  # the SQL inside execute_sql(...) is the step's real content
        out += f"<div class='meta'>SQL</div>{highlight(m.group(2).strip(), SqlLexer(), _FORMATTER)}"
    return out


def conversation(messages: list[Mapping[str, str]]) -> str:
    """Each message as the model saw it: the system prompt folded, the task, every thought, code cell
    (highlighted), interpreter output and the answer."""
    parts = []
    for m in messages or []:
        role, content = m.get("role") or "", m.get("content") or ""
        if role == "system":
            parts.append(
                f"<details class='turn'><summary class='role'>system prompt ({len(content):,} characters)</summary>"
                f"<pre>{_e(content)}</pre></details>"
            )
        elif role == "assistant":
            turn = parse_turn(content)
            inner = []
            if turn.think:
                inner.append(f"<div class='think'>{_e(turn.think.strip())}</div>")
            if turn.code is not None:
                inner.append(_code_html(turn.code))
            if turn.answer is not None:
                inner.append(f"<div class='answer'>{_e(turn.answer.strip())}</div>")
            if turn.is_void:
                inner.append(f"<p class='miss'>void turn ({_e(turn.void_reason)})</p><pre>{_e(content)}</pre>")
            parts.append(f"<div class='turn assistant'><div class='role'>assistant</div>{''.join(inner)}</div>")
        elif role == "tool":
            body = interpreter_body(content)
            shown = body if body is not None else content
            parts.append(f"<div class='turn tool'><div class='role'>interpreter</div><pre>{_e(shown)}</pre></div>")
        else:
            parts.append(f"<div class='turn user'><div class='role'>{_e(role)}</div><pre>{_e(content)}</pre></div>")
    return "\n".join(parts)


# -- lists ---------------------------------------------------------------------------------------------
def _filters_form(page: Page, source: Source, chosen: Mapping[str, str], text: str) -> str:
    fields = []
    for name, values in page.facets.items():
        options = ["<option value=''>any</option>"] + [
            f"<option value='{_e(v)}'{' selected' if str(v) == str(chosen.get(name, '')) else ''}>"
            f"{_e(v)} ({n})</option>"
            for v, n in values
        ]
        fields.append(
            f"<label>{_e(name.replace('_', ' '))}<select name='{_e(name)}'>{''.join(options)}</select></label>"
        )
    what = " / ".join(source.search)
    fields.append(f"<label>search {_e(what)}<input name='q' value='{_e(text)}' size='28'></label>")
    fields.append("<button type='submit'>Filter</button>")
    return f"<form class='filters' method='get'>{''.join(fields)}</form>"


def _pager(page: Page, href) -> str:
    if page.pages <= 1:
        return ""
    bits = []
    if page.page > 1:
        bits.append(f"<a href='{_e(href(page.page - 1))}'>‹ previous</a>")
    bits.append(f"<span>page {page.page} of {page.pages}</span>")
    if page.page < page.pages:
        bits.append(f"<a href='{_e(href(page.page + 1))}'>next ›</a>")
    return f"<p class='pager'>{''.join(bits)}</p>"


def _clip(text: Any, n: int = 140) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= n else s[: n - 1] + "…"


def releases_page(links: Links, releases: list[dict]) -> str:
    rows = []
    for r in releases:
        promo = r["promotion"].get("status") or "promoted (before promotion was recorded)"
        audit = (
            "<span class='ok'>pass</span>"
            if not r["misses"]
            else f"<span class='miss'>miss ({len(r['misses'])})</span>"
        )
        rows.append(
            f"<tr><td><a href='{_e(links.release(r['version_id']))}'>{_e(r['version_id'])}</a></td>"
            f"<td class='num'>{_e(r['n_samples'])}</td><td>{audit}</td><td>{_e(promo)}</td>"
            f"<td>{_e(r['created_at'])}</td><td><a href='{_e(links.run(r['run_id'] or '', 'rejections'))}'>"
            "rejections of its run</a></td></tr>"
        )
    table = (
        "<table><tr><th>release</th><th>samples</th><th>audit</th><th>promotion</th><th>published</th><th></th></tr>"
        + "".join(rows)
        + "</table>"
        if rows
        else "<p class='meta'>No release has been published yet.</p>"
    )
    return _page("Releases", ["<h1>Releases</h1>", table], [("Sample viewer", "")])


def release_page(
    links: Links, version_id: str, manifest: Mapping, page: Page, source: Source, chosen: Mapping[str, str], text: str
) -> str:
    rows = []
    for r in page.rows:
        rows.append(
            f"<tr><td><a href='{_e(links.sample(version_id, r['sample_id']))}'>{_e(r['sample_id'][:12])}</a></td>"
            f"<td>{_e(r.get('category'))}</td><td class='num'>{_e(r.get('hop'))}</td>"
            f"<td>{_e(r.get('data_format'))}</td>"
            f"<td>{_e(r.get('split'))}</td><td>{_e(r.get('answer_check'))}</td><td>{_e(r.get('judge_verdict'))}</td>"
            f"<td>{_e(_clip(r.get('question')))}</td></tr>"
        )
    head = (
        "<tr><th>sample</th><th>category</th><th>hop</th><th>format</th><th>split</th><th>answer check</th>"
        "<th>verdict</th><th>question</th></tr>"
    )
    body = [
        f"<h1>Release {_e(version_id)}</h1>",
        f"<p class='meta'>{_e(manifest.get('n_samples'))} samples · content {_e(manifest.get('content_hash'))} · "
        f"published {_e(manifest.get('created_at'))} · "
        f"run <a href='{_e(links.run(manifest.get('run_id') or '', 'rejections'))}'>"
        f"{_e(manifest.get('run_id'))}</a></p>",
        audit_section(release_summary(manifest), links),
        _filters_form(page, source, chosen, text),
        f"<p>{page.total:,} matching samples</p>",
        f"<table>{head}{''.join(rows)}</table>" if rows else "<p class='meta'>No sample matches.</p>",
        _pager(page, lambda n: links.release(version_id, **chosen, q=text, page=n)),
    ]
    crumbs = [("Sample viewer", links.home()), (version_id, "")]
    return _page(f"Release {version_id}", body, crumbs)


_SAMPLE_FIELDS = (
    "sample_id", "query_id", "trajectory_id", "file_id", "data_uri", "data_format", "category", "hop", "split",
    "answer_check", "judge_verdict", "selection_strategy", "reflection_round", "model",
)  # fmt: skip


def sample_page(links: Links, version_id: str, row: Mapping) -> str:
    facts = "".join(f"<tr><th>{_e(k)}</th><td>{_e(row.get(k))}</td></tr>" for k in _SAMPLE_FIELDS if k in row)
    body = [
        f"<h1>{_e(_clip(row.get('question'), 200))}</h1>",
        f"<table>{facts}</table>",
        "<h2>Conversation</h2>",
        conversation(row.get("messages") or []),
        "<h2>Answer and verdict</h2>",
        f"<table><tr><th>final answer</th><td>{_e(row.get('final_answer'))}</td></tr>"
        f"<tr><th>reference answer</th><td>{_e(row.get('reference_answer'))}</td></tr>"
        f"<tr><th>answer check</th><td>{_e(row.get('answer_check'))}</td></tr>"
        f"<tr><th>judge verdict</th><td>{_e(row.get('judge_verdict'))}</td></tr>"
        f"<tr><th>judge reasoning</th><td><pre>{_e(row.get('judge_reasoning'))}</pre></td></tr></table>",
    ]
    crumbs = [("Sample viewer", links.home()), (version_id, links.release(version_id)), (row["sample_id"][:12], "")]
    return _page(f"Sample {row['sample_id']}", body, crumbs)


def run_page(links: Links, run_id: str, page: Page, source: Source, chosen: Mapping[str, str], text: str) -> str:
    kind = source.kind
    other = "rejections" if kind == "trajectories" else "trajectories"
    rows = []
    for r in page.rows:
        key = r[source.key]
        cells = "".join(f"<td>{_e(_clip(r.get(c), 90))}</td>" for c in source.listed if c != source.key)
        rows.append(f"<tr><td><a href='{_e(links.run_item(run_id, kind, key))}'>{_e(key[:14])}</a></td>{cells}</tr>")
    head = "<tr>" + "".join(f"<th>{_e(c.replace('_', ' '))}</th>" for c in source.listed) + "</tr>"
    body = [
        f"<h1>{_e(kind.capitalize())} of run {_e(run_id)}</h1>",
        f"<p><a href='{_e(links.run(run_id, other))}'>{_e(other)} of this run</a></p>",
        _filters_form(page, source, chosen, text),
        f"<p>{page.total:,} matching {kind}</p>",
        f"<table>{head}{''.join(rows)}</table>" if rows else f"<p class='meta'>No {kind} match.</p>",
        _pager(page, lambda n: links.run(run_id, kind, **chosen, q=text, page=n)),
    ]
    return _page(f"{kind} of {run_id}", body, [("Sample viewer", links.home()), (f"run {run_id}", "")])


def trajectory_page(links: Links, run_id: str, row: Mapping) -> str:
    facts = "".join(
        f"<tr><th>{_e(k)}</th><td>{_e(row.get(k))}</td></tr>"
        for k in (
            "trajectory_id",
            "query_id",
            "sample_index",
            "reflection_round",
            "status",
            "error",
            "n_turns",
            "n_void_turns",
            "model",
            "policy",
        )  # fmt: skip
    )
    body = [
        f"<h1>Trajectory {_e(row['trajectory_id'][:14])}: <span class='status'>{_e(row.get('status'))}</span></h1>",
        f"<table>{facts}</table>",
        "<h2>Conversation</h2>",
        conversation(row.get("messages") or []),
        f"<p>Final answer: <span class='answer'>{_e(row.get('final_answer'))}</span></p>",
    ]
    crumbs = [("Sample viewer", links.home()), (f"run {run_id}", links.run(run_id, "trajectories")), ("trajectory", "")]
    return _page(f"Trajectory {row['trajectory_id']}", body, crumbs)


def rejection_page(links: Links, run_id: str, row: Mapping, judged: Mapping | None, trajectories: list[Mapping]) -> str:
    body = [
        f"<h1>Rejected: <span class='miss'>{_e(row.get('reason_code'))}</span></h1>",
        f"<p class='meta'>stage {_e(row.get('stage'))} · item {_e(row.get('item_id'))} · "
        f"query {_e(row.get('query_id'))}"
        f" · file {_e(row.get('file_id'))}</p>",
        f"<h2>Why</h2><p>{_e(row.get('reason'))}</p>",
    ]
    if row.get("raw"):
        raw = row["raw"]
        try:
            raw = json.dumps(json.loads(raw), indent=1)[:8000]
        except (TypeError, ValueError):
            pass
        body.append(f"<h2>What was rejected</h2><pre>{_e(raw)}</pre>")
    if judged is not None:
        body += ["<h2>The sample as judged</h2>", conversation(judged.get("messages") or [])]
    for t in trajectories:
        body += [
            f"<h2>Trajectory {_e(t['trajectory_id'][:14])} (sample {_e(t.get('sample_index'))}, round "
            f"{_e(t.get('reflection_round'))}): {_e(t.get('status'))} {_e(t.get('error') or '')}</h2>",
            conversation(t.get("messages") or []),
        ]
    crumbs = [("Sample viewer", links.home()), (f"run {run_id}", links.run(run_id, "rejections")), ("rejection", "")]
    return _page(f"Rejection {row.get('item_id')}", body, crumbs)
