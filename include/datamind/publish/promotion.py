"""Whether a release may be trained on: promoted by its audit, or by a person who approved it.

A release that meets every audit threshold is promoted when it is published, unless the deployment asks a
person to approve every release (``DATAMIND_APPROVE_EVERY_RELEASE``, read in ``datamind.settings``). Any
other release is published for inspection, ``awaiting_approval``: readable, in the viewer and the reports,
but never exported for training until someone approves it. The decision, who made it and their comment are
written into the release's manifest and card; a rejected release stays readable and is never trained on.
Who may decide is the deployment's choice (``DATAMIND_RELEASE_APPROVERS``, read in ``datamind.settings``);
Airflow refuses anyone else's answer.
"""

from __future__ import annotations

import json
import logging
import posixpath
from datetime import UTC, datetime

from datamind.publish.audit import missed_figures, verdicts
from datamind.settings import approve_every_release
from datamind.storage import DataRoot
from datamind.tables import AWAITING, PROMOTED, REJECTED

log = logging.getLogger(__name__)

CARD_START, CARD_END = "<!-- promotion -->", "<!-- /promotion -->"


def initial(audit: dict, approve_every: bool | None = None) -> dict:
    """The promotion a release gets when it is published."""
    failing = missed_figures(audit)
    every = approve_every_release() if approve_every is None else approve_every
    if not failing and not every:
        return {"status": PROMOTED, "by": "audit", "reason": "every audit figure meets its threshold", "failing": []}
    reason = (
        f"the audit misses {', '.join(failing)}"
        if failing
        else "every audit figure passes; this deployment asks a person to approve every release"
    )
    return {"status": AWAITING, "by": None, "reason": reason, "failing": failing}


def card_section(promotion: dict | None) -> str:
    p = promotion or {"status": PROMOTED, "by": "audit", "reason": "published before promotion was recorded"}
    lines = [CARD_START, "## Promotion", ""]
    state = {PROMOTED: "promoted: may be trained on", AWAITING: "awaiting a person's approval: not trained on",
             REJECTED: "rejected: kept for inspection, never trained on"}[p["status"]]  # fmt: skip
    lines.append(f"- status: **{state}**")
    lines.append(f"- why: {p.get('reason') or ''}")
    if p.get("decided_by"):
        lines.append(f"- decided by {p['decided_by']} at {p.get('decided_at')}: {p.get('comment') or '(no comment)'}")
    lines.append(CARD_END)
    return "\n".join(lines)


def decide(
    root: DataRoot | str, version: int, *, approved: bool, user: str, comment: str = "", now: datetime | None = None
) -> dict:
    """Record a person's decision on a release awaiting approval; returns its manifest. Deciding again on
    a release already decided changes nothing (a retried task, a second click)."""
    from datamind.assets import DIRS
    from datamind.tables import CARD, MANIFEST, read_manifest

    root = DataRoot.of(root)
    manifest = read_manifest(root, version)
    if manifest is None:
        raise ValueError(f"no complete release v{version} under {root.uri(DIRS['dataset'])}")
    current = manifest.get("promotion") or {}
    if current.get("status") != AWAITING:
        return manifest
    manifest["promotion"] = {
        **current,
        "status": PROMOTED if approved else REJECTED,
        "decided_by": user,
        "comment": comment,
        "decided_at": (now or datetime.now(UTC)).isoformat(),
    }
    vdir = posixpath.join(DIRS["dataset"], f"v{version}")
    card_rel = posixpath.join(vdir, CARD)
    if root.exists(card_rel):
        root.write_text(card_rel, replace_card_section(root.read_text(card_rel), manifest["promotion"]))
    root.write_text(posixpath.join(vdir, MANIFEST), json.dumps(manifest, indent=2, sort_keys=True))
    _refresh_reports(root, manifest.get("version_id") or f"v{version}")
    return manifest


def _refresh_reports(root: DataRoot, version_id: str) -> None:
    """The release's report files and the report index say the decision too (the UI reads it from the manifest
    anyway): a report that cannot be rewritten is logged, never a reason to fail the decision."""
    from datamind.quality.report_index import refresh_release_reports

    try:
        refresh_release_reports(root, version_id)
    except (OSError, ValueError) as exc:
        log.warning("release %s: its reports still show the state it was published in: %s", version_id, exc)


def replace_card_section(card: str, promotion: dict) -> str:
    section = card_section(promotion)
    if CARD_START in card and CARD_END in card:
        head, rest = card.split(CARD_START, 1)
        return head + section + rest.split(CARD_END, 1)[1]
    return card.rstrip("\n") + "\n\n" + section + "\n"


def release_summary(manifest: dict) -> dict:
    """A release's audit and promotion as its report, its Asset event and a reviewer see them."""
    audit = manifest.get("audit") or {}
    failing = missed_figures(audit) if audit else []
    return {
        "version_id": manifest.get("version_id") or f"v{manifest.get('version')}",
        "n_samples": manifest.get("n_samples"),
        "audit_verdict": "miss" if failing else "pass",
        "failing_figures": failing,
        "audit": verdicts(audit) if audit else [],
        "promotion": manifest.get("promotion") or {},
        "cost": manifest.get("cost") or {},
        "changes": manifest.get("changes"),
        # who wrote its samples: trajectory model -> question model -> samples (empty for older releases)
        "writers": audit.get("samples_per_writers") or {},
    }


def review_body(manifest: dict, report_url: str, viewer_url: str) -> str:
    """The approval task's text (Markdown): why a person is asked, what the audit missed, where to look."""
    from datamind.publish.changes import as_markdown

    p = manifest.get("promotion") or {}
    lines = [
        f"Release **{manifest.get('version_id')}** ({manifest.get('n_samples')} samples) was published for "
        f"inspection and asks for a decision here: {p.get('reason', '')}.",
        "",
    ]
    audit = manifest.get("audit") or {}
    for v in verdicts(audit) if audit else []:
        if v["ok"] is False:
            lines.append(f"- **{v['name']}** = {v['value']} (want {v['op']} {v['bound']}): {v['meaning']}")
    lines += ["", *as_markdown(manifest.get("changes"))]
    lines += ["", f"- [Quality report of this release]({report_url})", f"- [Its samples in the viewer]({viewer_url})"]
    lines += [
        "",
        "Approve to promote it (its dataset event starts train_agent, if that DAG is unpaused); reject to keep it "
        "readable but never trained on. The decision, who made it and when are then shown on the release's report "
        "and its page in the viewer.",
    ]
    return "\n".join(lines)
