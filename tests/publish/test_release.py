"""A release from judged rows to its promotion (datamind.publish.release), as the publish_dataset DAG runs it: the
gate a release takes, the decision a person records, what the dataset Asset event carries and which report it
links."""

from __future__ import annotations

import random
from pathlib import Path
from urllib.parse import quote

import pytest
from review.release_builder import sample_row

from datamind.assets import DIRS
from datamind.publish import release
from datamind.publish.params import PublishParams
from datamind.publish.stage import NothingToPublish
from datamind.schemas import DATASET
from datamind.shards import write_shard
from datamind.storage import DataRoot
from datamind.tables import read_manifest

REPO = Path(__file__).resolve().parents[2]


def write_judged(root: DataRoot, n: int, *, seed: int = 7, flawed: bool = False, answer: str | None = None) -> None:
    """``n`` varied judged samples (they meet every audit threshold unless ``flawed``), their data files staged."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        row = sample_row(i, rng, flawed)
        row.pop("split")  # publishing decides the split
        row["data_uri"] = f"raw/{row['file_id']}/orders.csv"
        if answer is not None:
            row["final_answer"] = answer
        if not root.exists(row["data_uri"]):
            root.write_text(row["data_uri"], "city,amount\nLyon,1\n")
        rows.append(row)
    write_shard(root, DATASET, DIRS["judged"], rows, f"part-{seed}.parquet")


class Validations:
    """A stand-in for the stage finalizer: records what it was asked to check."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, rel_dir: str, summary: dict) -> dict:
        self.calls.append((rel_dir, summary))
        return {"new_rows": summary["n_samples"], "quality_report": f"reports/{rel_dir}"}


def _publish(root, run_id: str, validate, params: dict | None = None) -> dict:
    return release.publish(
        root,
        run_id,
        PublishParams.from_form(params),
        validate=validate,
        report_url="/report/publish",
        viewer_url=lambda v: f"/viewer/{v}/",
    )


def test_a_release_that_meets_its_audit_takes_the_gate_to_promotion_and_the_same_release_goes_nowhere(root):
    write_judged(root, 40)
    validate = Validations()
    published = _publish(root, "run-1", validate, {"judged_partition": ""})  # the form's empty choice: the only one
    assert published["version"] == 1 and published["gate"] == release.AUDIT_PASSED
    assert validate.calls == [("dataset/v1", validate.calls[0][1])] and validate.calls[0][1]["version_id"] == "v1"
    assert published["quality"]["new_rows"] == 40
    assert "/report/publish" in published["review_body"] and "/viewer/v1/" in published["review_body"]
    again = _publish(root, "run-2", validate)
    assert again["unchanged"] and again["gate"] is None and len(validate.calls) == 1  # nothing validated again
    assert release.promote(root, again, None) is None


def test_a_release_that_misses_its_audit_asks_a_person(root):
    write_judged(root, 120, flawed=True)
    published = _publish(root, "run-1", Validations())
    assert published["gate"] == release.REVIEW
    assert "repeated_word_question_share" in published["review_body"]


def test_with_nothing_publishable_it_raises_and_writes_nothing(root):
    write_judged(root, 3, answer="word " * 1500)  # every answer too long
    with pytest.raises(NothingToPublish):
        _publish(root, "run-1", Validations())
    assert read_manifest(root) is None


def test_promotion_by_the_audit_announces_the_release_with_the_runs_counts(root):
    write_judged(root, 40)
    promoted = release.promote(root, _publish(root, "run-1", Validations()), None)
    assert promoted.trainable and promoted.release["version_id"] == "v1"
    assert promoted.event["version"] == "v1" and promoted.event["promoted_by"] == "audit"
    assert promoted.event["audit_verdict"] == "pass" and promoted.event["failing_figures"] == []
    assert promoted.counts["rows_in"] == 40 and promoted.counts["new_rows"] == 40 and promoted.counts["rejected"] == {}
    assert promoted.counts["quality_report"] == "reports/dataset/v1"  # the publish task's report


def test_a_second_releases_event_says_how_many_samples_it_added_beside_all_it_holds(root):
    """Issue 47: the backfill page showed publish_dataset "12 in, 12 out" for a backfill that brought 9: a
    release holds every earlier release's samples, so its event also says what this one added."""
    write_judged(root, 40)
    assert release.promote(root, _publish(root, "run-1", Validations()), None).event["samples_added"] == 40
    write_judged(root, 50, seed=8)  # the same 40 sample ids again (seed only varies their wording) and 10 more
    promoted = release.promote(root, _publish(root, "run-2", Validations()), None)
    assert promoted.release["version_id"] == "v2" and promoted.counts["new_rows"] == 50
    assert promoted.event["samples_added"] == 10


@pytest.mark.parametrize(("choice", "trainable"), [("Approve", True), ("Reject", False)])
def test_a_persons_decision_is_recorded_and_only_an_approval_is_announced(root, choice, trainable):
    write_judged(root, 120, flawed=True)
    published = _publish(root, "run-1", Validations())
    answer = {"chosen_options": [choice], "responded_by_user": {"id": "ada", "name": "Ada"},
              "params_input": {"comment": "checked the doubled words"}}  # fmt: skip
    decision = release.Decision.of_answer(answer, "Approve")
    assert decision == release.Decision(approved=trainable, user="Ada", comment="checked the doubled words")
    promoted = release.promote(root, published, decision)
    assert promoted.trainable is trainable
    assert read_manifest(root, 1)["promotion"]["decided_by"] == "Ada"
    assert promoted.event["promoted_by"] == "Ada"


def test_an_answer_without_a_name_or_comment_still_decides():
    assert release.Decision.of_answer(None, "Approve") is None
    bare = release.Decision.of_answer({"chosen_options": ["Approve"]}, "Approve")
    assert bare == release.Decision(approved=True, user="unknown", comment="")


def test_the_dags_gate_branches_to_its_own_tasks_and_the_dataset_event_links_the_publish_report(
    airflow_db, root, monkeypatch
):
    """issue 47: the dataset event's report_url named the promote task, which never writes a report."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    monkeypatch.setenv("DATAMIND_DATA_ROOT", root.url)
    monkeypatch.delenv("DATAMIND_APPROVE_EVERY_RELEASE", raising=False)
    write_judged(root, 40)
    dag = DagBag(dag_folder=str(REPO / "dags" / "publish_dataset.py")).dags["publish_dataset"]
    assert {release.AUDIT_PASSED, release.REVIEW} <= set(dag.task_ids)
    run = dag.test()
    states = {t.task_id: t.state for t in run.get_task_instances()}
    assert run.state == "success" and states["promote"] == "success" and states["review"] == "skipped"
    with create_session() as session:
        event = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri.startswith("datamind://dataset"), AssetEvent.source_run_id == run.run_id)
            .one()
        )
    extra = event.extra
    assert extra["version"] == "v1" and extra["promoted_by"] == "audit" and extra["rows_out"] == 40
    assert (
        extra["report_url"]
        == f"/plugin/datamind-quality-reports/datamind/task/publish_dataset/{quote(run.run_id, safe='')}/publish"
    )
