"""HTML of the sample viewer: releases, a page of samples with filters, one sample as a conversation, and
one run's trajectories and rejections. Self-contained pages (inline CSS, no script): every link is a plain
GET with the filters in its query string, so any page, a filtered list or one sample, can be pasted into a
ticket and opens the same view.

This module decides what each page shows; the markup is in ``templates/``, rendered with every value escaped.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any

from datamind.agent.protocol import interpreter_body, parse_turn, strip_code_fences
from datamind.publish.promotion import release_summary
from datamind.quality.viewer_links import Links
from datamind.review.query import NOT_SELECTED, Page, Source
from datamind.templating import render


def _turns(messages: list[Mapping[str, str]]) -> list[dict[str, Any]]:
    """Each message as the model saw it: the system prompt (folded on the page), the task, every thought,
    code cell, interpreter output and the answer."""
    turns = []
    for m in messages or []:
        role, content = m.get("role") or "", m.get("content") or ""
        if role == "system":
            turns.append({"kind": "system", "content": content, "size": f"{len(content):,}"})
        elif role == "assistant":
            turn = parse_turn(content)
            turns.append(
                {
                    "kind": "assistant",
                    "think": turn.think.strip() if turn.think else "",
                    "code": strip_code_fences(turn.code) if turn.code is not None else None,
                    "answer": turn.answer.strip() if turn.answer is not None else None,
                    "void": turn.is_void,
                    "void_reason": turn.void_reason,
                    "content": content,
                }
            )
        elif role == "tool":
            body = interpreter_body(content)
            turns.append({"kind": "tool", "content": body if body is not None else content})
        else:
            turns.append({"kind": "other", "role": role, "content": content})
    return turns


def releases_page(links: Links, releases: list[dict]) -> str:
    return render("review/releases.html.j2", links=links, releases=releases)


def file_names(manifest: Mapping) -> dict[str, str]:
    """file_id -> the data file's name, as the release carries it (``files/<file_id>/<name>``)."""
    return {fid: posixpath.basename(f.get("path") or "") or fid for fid, f in (manifest.get("files") or {}).items()}


def _file_labels(names: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """What a file filter shows for each file id: its name, and the id's start to tell same-named files apart."""
    return {"file_id": {fid: f"{name} ({fid[:8]})" for fid, name in names.items()}}


def release_page(
    links: Links,
    version_id: str,
    manifest: Mapping,
    page: Page,
    source: Source,
    chosen: Mapping[str, str],
    text: str,
    *,
    changes: Mapping | None = None,
    report: str | None = None,
    backfills: list[tuple[str, str]] = (),
) -> str:
    """A release: its audit and promotion, what changed since the release before it (``changes``; the
    manifest's by default), a link to its quality report (``report``: its folder under reports/), the backfills
    that fed it (``backfills``: label, href of each page), its samples."""
    names = file_names(manifest)
    release = release_summary(manifest)
    if changes is not None:
        release["changes"] = changes
    return render(
        "review/release.html.j2",
        links=links,
        version_id=version_id,
        manifest=manifest,
        release=release,
        report_href=links.report(report) if report else None,
        backfills=list(backfills),
        names=names,
        labels=_file_labels(names),
        page=page,
        source=source,
        chosen=chosen,
        text=text,
        page_href=lambda n: links.release(version_id, **chosen, q=text, page=n),
    )


def release_rejections_page(
    links: Links,
    version_id: str,
    manifest: Mapping,
    previous: str | None,
    page: Page,
    source: Source,
    chosen: Mapping[str, str],
    text: str,
) -> str:
    """What the runs that fed a release rejected: every rejection recorded after ``previous`` was published
    up to this release, each linked under its own run."""
    names = file_names(manifest)
    return render(
        "review/run.html.j2",
        links=links,
        heading=f"Rejections on the way to {version_id}",
        explain=(
            f"What every stage rejected from {'the publication of ' + previous if previous else 'the start'} up to "
            f"the publication of {version_id}: the runs that fed this release. The judge's trajectories that were "
            "fine but not the one kept for their query are not rejections and are not listed."
        ),
        crumbs=[("Sample viewer", links.home()), (version_id, links.release(version_id)), ("rejections", "")],
        others=[],
        labels=_file_labels(names),
        page=page,
        source=source,
        chosen=chosen,
        text=text,
        item_href=lambda r: links.run_item(r.get("run_id") or "", "rejections", r[source.key]),
        page_href=lambda n: links.release_rejections(version_id, **chosen, q=text, page=n),
    )


_SAMPLE_FIELDS = (
    "sample_id", "query_id", "trajectory_id", "file_id", "data_uri", "data_format", "category", "hop", "split",
    "answer_check", "judge_verdict", "selection_strategy", "reflection_round", "model", "question_model",
)  # fmt: skip
# What a sample's page calls a field whose name says less than it should.
_FIELD_TITLES = {"model": "written by (model)", "question_model": "question by (question_model)"}
_TRAJECTORY_FIELDS = (
    "trajectory_id", "query_id", "sample_index", "reflection_round", "status", "error", "n_turns", "n_void_turns",
    "model", "policy",
)  # fmt: skip


def sample_page(links: Links, version_id: str, row: Mapping) -> str:
    return render(
        "review/sample.html.j2",
        links=links,
        version_id=version_id,
        row=row,
        fields=_SAMPLE_FIELDS,
        titles=_FIELD_TITLES,
        turns=_turns(row.get("messages") or []),
    )


# What each of a run's lists holds, in words.
RUN_KINDS = {
    "trajectories": ("Trajectories", "Every trajectory this run sampled, with its status."),
    "rejections": (
        "Rejections",
        "What this run refused, each with its reason. Trajectories the judge did not select (another trajectory "
        "of the same query was kept) are not rejections: they are listed apart.",
    ),
    NOT_SELECTED: (
        "Trajectories not selected",
        "Trajectories the judge found fine but did not keep: another trajectory of the same query was selected as "
        "its sample. Nothing is wrong with them; they are not rejections.",
    ),
}


def run_page(links: Links, run_id: str, page: Page, source: Source, chosen: Mapping[str, str], text: str) -> str:
    label, explain = RUN_KINDS[source.kind]
    return render(
        "review/run.html.j2",
        links=links,
        heading=f"{label} of run {run_id}",
        explain=explain,
        crumbs=[("Sample viewer", links.home()), (f"run {run_id}", "")],
        others=[(RUN_KINDS[k][0], links.run(run_id, k)) for k in RUN_KINDS if k != source.kind],
        labels={},
        page=page,
        source=source,
        chosen=chosen,
        text=text,
        item_href=lambda r: links.run_item(run_id, source.kind, r[source.key]),
        page_href=lambda n: links.run(run_id, source.kind, **chosen, q=text, page=n),
    )


def trajectory_page(links: Links, run_id: str, row: Mapping) -> str:
    return render(
        "review/trajectory.html.j2",
        links=links,
        run_id=run_id,
        row=row,
        fields=_TRAJECTORY_FIELDS,
        turns=_turns(row.get("messages") or []),
    )


def rejection_page(
    links: Links,
    run_id: str,
    row: Mapping,
    judged: Mapping | None,
    trajectories: list[Mapping],
    kind: str = "rejections",
) -> str:
    raw = row.get("raw")
    if raw:
        try:
            raw = json.dumps(json.loads(raw), indent=1)[:8000]
        except (TypeError, ValueError):
            pass
    return render(
        "review/rejection.html.j2",
        links=links,
        run_id=run_id,
        kind=kind,
        row=row,
        raw=raw,
        judged=_turns(judged.get("messages") or []) if judged is not None else None,
        trajectories=[{"row": t, "turns": _turns(t.get("messages") or [])} for t in trajectories],
    )
