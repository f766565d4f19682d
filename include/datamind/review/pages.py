"""HTML of the sample viewer: releases, a page of samples with filters, one sample as a conversation, and
one run's trajectories and rejections. Self-contained pages (inline CSS, no script): every link is a plain
GET with the filters in its query string, so any page, a filtered list or one sample, can be pasted into a
ticket and opens the same view.

This module decides what each page shows; the markup is in ``templates/``, rendered with every value escaped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from datamind.publish.promotion import release_summary
from datamind.quality.viewer_links import Links
from datamind.review.query import Page, Source
from datamind.rollout.protocol import interpreter_body, parse_turn, strip_code_fences
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


def release_page(
    links: Links, version_id: str, manifest: Mapping, page: Page, source: Source, chosen: Mapping[str, str], text: str
) -> str:
    return render(
        "review/release.html.j2",
        links=links,
        version_id=version_id,
        manifest=manifest,
        release=release_summary(manifest),
        page=page,
        source=source,
        chosen=chosen,
        text=text,
        page_href=lambda n: links.release(version_id, **chosen, q=text, page=n),
    )


_SAMPLE_FIELDS = (
    "sample_id", "query_id", "trajectory_id", "file_id", "data_uri", "data_format", "category", "hop", "split",
    "answer_check", "judge_verdict", "selection_strategy", "reflection_round", "model",
)  # fmt: skip
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
        turns=_turns(row.get("messages") or []),
    )


def run_page(links: Links, run_id: str, page: Page, source: Source, chosen: Mapping[str, str], text: str) -> str:
    return render(
        "review/run.html.j2",
        links=links,
        run_id=run_id,
        page=page,
        source=source,
        chosen=chosen,
        text=text,
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


def rejection_page(links: Links, run_id: str, row: Mapping, judged: Mapping | None, trajectories: list[Mapping]) -> str:
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
        row=row,
        raw=raw,
        judged=_turns(judged.get("messages") or []) if judged is not None else None,
        trajectories=[{"row": t, "turns": _turns(t.get("messages") or [])} for t in trajectories],
    )
