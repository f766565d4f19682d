"""A release from judged rows to its promotion, as the ``publish_dataset`` DAG runs it (its tasks only wire these
functions to Airflow: the review form, the branch, the Asset event).

``publish``: filter and write the new version (``publish.stage``), check it with its quality report, and say
which way its gate goes: a release that meets every audit threshold is promoted at once (``audit_passed``), any
other asks a person (``review``), and the same release again goes nowhere. ``promote``: record a person's
decision, if one was asked, and say what the ``dataset`` Asset event carries, or that nothing is announced.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from datamind import tables
from datamind.publish import promotion
from datamind.publish.params import PublishParams
from datamind.storage import DataRoot

log = logging.getLogger(__name__)

# Where the gate branches: the task ids of the publish_dataset DAG.
AUDIT_PASSED, REVIEW = "audit_passed", "review"

# validate(release folder, release summary) -> the quality summary of its report (``pipeline.finalize_stage``,
# handed in by the caller: the stage-wide finalizer sits above the stages)
Validate = Callable[[str, dict], dict]


def _log_summary(title: str, summary: dict[str, Any], skip: tuple[type, ...] = (list, dict)) -> None:
    log.info("\n".join([title] + [f"  {k}: {v}" for k, v in summary.items() if not isinstance(v, skip)]))


def publish(
    root: DataRoot | str,
    run_id: str,
    params: PublishParams,
    *,
    validate: Validate,
    report_url: str,
    viewer_url: Callable[[str], str],
) -> dict:
    """Publish the judged rows as a new release and decide its gate; returns its manifest with ``gate`` (the
    branch to take: ``AUDIT_PASSED``, ``REVIEW``, or None for the same release again), ``quality`` (its report's
    summary) and ``review_body`` (what a reviewer reads, linking ``report_url`` and ``viewer_url(version_id)``).
    Raises ``NothingToPublish`` when no sample is publishable and no release holds one."""
    from datamind.publish.stage import publish_dataset

    root = DataRoot.of(root)
    manifest = publish_dataset(root, run_id, PublishParams.given(params))
    _log_summary("Published dataset", manifest)
    _log_summary("Dataset audit (python -m datamind.publish.audit)", manifest.get("audit") or {}, (dict,))
    if manifest.get("unchanged"):  # the same release again: nothing to promote, train_agent is not woken
        return {**manifest, "gate": None}
    release = promotion.release_summary(manifest)
    quality = validate(tables.release_dir(manifest["version"]), release)
    _log_summary("Dataset quality", quality, ())
    return {
        **manifest,
        "quality": quality,
        "gate": AUDIT_PASSED if tables.trainable(manifest) else REVIEW,
        "review_body": promotion.review_body(manifest, report_url, viewer_url(release["version_id"])),
    }


@dataclass(frozen=True)
class Decision:
    """A person's answer to the review of a release."""

    approved: bool
    user: str
    comment: str = ""

    @classmethod
    def of_answer(cls, answer: dict | None, approve: str) -> Decision | None:
        """From what a review task records (``chosen_options``, ``responded_by_user``, ``params_input``); None
        when nobody was asked (the release passed its audit)."""
        if not answer:
            return None
        user = answer.get("responded_by_user") or {}
        return cls(
            approved=answer.get("chosen_options") == [approve],
            user=user.get("name") or user.get("id") or "unknown",
            comment=(answer.get("params_input") or {}).get("comment") or "",
        )


@dataclass(frozen=True)
class Promotion:
    """What promoting a published release came to."""

    manifest: dict
    release: dict  # promotion.release_summary
    event: dict  # what the dataset Asset event carries besides the run's counts
    counts: dict  # the run's counts (rows in and out, drops by reason), as every stage's Asset event has them

    @property
    def trainable(self) -> bool:
        return tables.trainable(self.manifest)


def promote(root: DataRoot | str, published: dict, decision: Decision | None) -> Promotion | None:
    """Record ``decision`` (if a person was asked) in the release and say what its Asset event carries; None when
    ``published`` is the same release again. A release that is not ``trainable`` afterwards is announced to
    nobody: only a promoted release wakes training."""
    if published.get("gate") is None:
        return None
    manifest = published
    if decision is not None:
        manifest = promotion.decide(
            DataRoot.of(root), published["version"], approved=decision.approved, user=decision.user,
            comment=decision.comment,
        )  # fmt: skip
        _log_summary("Promotion decided", manifest["promotion"], ())
    release = promotion.release_summary(manifest)
    event = {
        # the release's one name travels with the event, so train_agent and a person see the same id
        "version": release["version_id"],
        "content_hash": manifest.get("content_hash"),
        "audit_verdict": release["audit_verdict"],
        "failing_figures": release["failing_figures"],
        "promoted_by": manifest["promotion"].get("decided_by") or manifest["promotion"].get("by"),
        # a release holds every earlier release's samples too: what this one added is what a backfill brought
        "samples_added": ((manifest.get("changes") or {}).get("samples") or {}).get("added"),
    }
    counts = {
        **(published.get("quality") or {}),
        "rows_in": manifest.get("n_judged", manifest.get("n_samples", 0) + manifest.get("n_filtered", 0)),
        "new_rows": manifest.get("n_samples"),
        "rejected": manifest.get("filtered_by_reason") or {},
    }
    return Promotion(manifest, release, event, counts)
