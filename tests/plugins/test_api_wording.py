"""What Airflow's own screens say about our DAGs: a trigger form's refused value answers in one sentence (not the
field's raw JSON schema), and a release's answered review says which way it was decided. Driven through the
middleware the api-server mounts, in front of an app answering as Airflow's routes do."""

from __future__ import annotations

import airflow  # noqa: F401  (puts the plugins folder on sys.path, as in a deployment)
import pytest
from airflow.serialization.definitions.param import SerializedParam, SerializedParamsDict
from fastapi import FastAPI, HTTPException
from fastapi.testclient import TestClient

from datamind.ingest.params import FilesSource
from datamind_airflow import api_wording
from datamind_airflow.api_wording import REVIEWS, ApiWording
from datamind_airflow.forms import explain_param_error
from datamind_airflow.ingest_tasks import ingest_form


def _refusal(field: str, value) -> str:
    """What Airflow's api-server answers when ingest_files is triggered with ``field`` = ``value``."""
    form = ingest_form(FilesSource())
    params = SerializedParamsDict({k: SerializedParam(p.value, p.description, **p.schema) for k, p in form.items()})
    with pytest.raises(Exception) as err:
        params.deep_merge({field: value}).validate()
    return str(err.value)


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("min_rows", "ten", "Minimum rows per table (min_rows) must be a whole number; it was given 'ten'."),
        ("shard_size", 2.5, "Files per task instance (shard_size) must be a whole number; it was given 2.5."),
        ("shard_size", 5000, "Files per task instance (shard_size) must be at most 1000; it was given 5000."),
        ("min_rows", 0, "Minimum rows per table (min_rows) must be at least 1; it was given 0."),
        ("more_source_uris", "/data/b", 'More source URIs (more_source_uris) must be a list, e.g. ["a", "b"]'),
        ("more_source_uris", [""], "Each item of more_source_uris must not be empty."),
        ("source_name", "My Files", "Source name (source_name) does not allow 'My Files'. Allowed characters:"),
    ],
)
def test_a_refused_form_value_reads_as_one_sentence(field, value, said):
    raw = _refusal(field, value)
    assert "Failed validating" in raw  # Airflow's own answer: the schema dump the form showed before
    sentence = explain_param_error(raw)
    assert sentence.startswith(said), sentence
    assert "\n" not in sentence and "Failed validating" not in sentence and "{'type'" not in sentence


def test_other_refusals_are_left_as_airflow_words_them():
    assert explain_param_error("Dag with dag_id: 'x' does not allow manual runs") is None


def _airflow_like() -> FastAPI:
    app = FastAPI()
    app.add_middleware(ApiWording)
    answered = {
        "task_instance": {"dag_id": "publish_dataset", "task_id": "review"},
        "body": "Release **v2** asks for a decision here.",
        "response_received": True,
        "chosen_options": ["Approve"],
        "params_input": {"comment": "doubled words: *fine*"},
        "responded_by_user": {"id": "admin", "name": "admin"},
        "responded_at": "2026-11-28T12:01:37Z",
    }
    waiting = {**answered, "response_received": False, "chosen_options": None, "responded_by_user": None}
    rejected = {**answered, "chosen_options": ["Reject"], "params_input": {}}
    other = {**answered, "task_instance": {"dag_id": "someone_elses", "task_id": "review"}}

    @app.post("/api/v2/dags/{dag_id}/dagRuns")
    def trigger(dag_id: str):
        raise HTTPException(400, _refusal("min_rows", "ten"))

    @app.get("/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/{map_index}/hitlDetails")
    def one(dag_id: str, run_id: str, task_id: str, map_index: int):
        return {"answered": answered, "waiting": waiting, "rejected": rejected, "other": other}[run_id]

    @app.get("/api/v2/dags/{dag_id}/dagRuns/{run_id}/hitlDetails")
    def listing(dag_id: str, run_id: str):
        return {"hitl_details": [answered, waiting, other], "total_entries": 3}

    @app.get("/api/v2/dags/{dag_id}/dagRuns")
    def unrelated(dag_id: str):
        return {"detail": _refusal("min_rows", "ten")}

    return app


def test_the_trigger_form_hears_the_sentence():
    client = TestClient(_airflow_like())
    r = client.post("/api/v2/dags/ingest_files/dagRuns", json={})
    assert r.status_code == 400
    assert r.json() == {"detail": "Minimum rows per table (min_rows) must be a whole number; it was given 'ten'."}
    # a route the middleware does not word keeps Airflow's text as it is
    assert "Failed validating" in client.get("/api/v2/dags/ingest_files/dagRuns").json()["detail"]


def test_an_answered_review_says_which_way_it_was_decided(monkeypatch):
    monkeypatch.setattr(api_wording, "trainer_paused", lambda: False)
    client = TestClient(_airflow_like())
    path = "/api/v2/dags/publish_dataset/dagRuns/{}/taskInstances/review/-1/hitlDetails"
    approved = client.get(path.format("answered")).json()["body"]
    head, _, rest = approved.partition("\n\n---\n\n")
    assert head.startswith("**Decided: approved** by admin at 2026-11-28T12:01:37Z.")
    assert "doubled words: \\*fine\\*" in head  # the comment, its Markdown inert
    assert "its dataset event starts train_agent (unpaused) on it" in head
    assert rest == "Release **v2** asks for a decision here."
    rejected = client.get(path.format("rejected")).json()["body"]
    assert rejected.startswith("**Decided: rejected** by admin") and "never trained on" in rejected
    assert "No comment." in rejected
    assert client.get(path.format("waiting")).json()["body"] == "Release **v2** asks for a decision here."
    assert client.get(path.format("other")).json()["body"] == "Release **v2** asks for a decision here."
    listed = client.get("/api/v2/dags/publish_dataset/dagRuns/r/hitlDetails").json()["hitl_details"]
    assert [d["body"].startswith("**Decided: approved**") for d in listed] == [True, False, False]


def test_an_approval_says_a_paused_trainer_does_not_start_and_an_unknown_one_only_if_unpaused(monkeypatch):
    """Issue 47: the note said "train_agent starts on it" while train_agent was paused; Airflow queues no run of a
    DAG paused when the dataset event is emitted, not even for after it is unpaused."""
    path = "/api/v2/dags/publish_dataset/dagRuns/answered/taskInstances/review/-1/hitlDetails"
    said = {}
    for state in (True, None):
        monkeypatch.setattr(api_wording, "trainer_paused", lambda state=state: state)
        said[state] = TestClient(_airflow_like()).get(path).json()["body"].partition("\n\n---\n\n")[0]
    assert "but train_agent is paused: its dataset event starts no run of it" in said[True]
    assert "trigger it by hand" in said[True].lower() and "(unpaused)" not in said[True]
    assert "starts train_agent if that DAG is unpaused" in said[None] and "is paused" not in said[None]
    # a rejection says nothing of training runs, whatever the trainer's state
    monkeypatch.setattr(api_wording, "trainer_paused", lambda: True)
    rejected = TestClient(_airflow_like()).get(path.replace("answered", "rejected")).json()["body"]
    assert "never trained on" in rejected and "train_agent" not in rejected.partition("\n\n---\n\n")[0]


def test_whether_the_trainer_is_paused_is_read_from_the_metadata_db(airflow_db):
    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel
    from airflow.utils.session import create_session

    from datamind.review.decision import TRAINER

    with create_session() as session:
        session.query(DagModel).filter(DagModel.dag_id == TRAINER).delete()
        session.merge(DagBundleModel(name="dags-folder"))
    assert api_wording.trainer_paused() is None  # not parsed yet: unknown, so the note says it conditionally
    for paused in (True, False):
        with create_session() as session:
            session.merge(DagModel(dag_id=TRAINER, bundle_name="dags-folder", is_paused=paused))
        assert api_wording.trainer_paused() is paused


def test_the_worded_review_is_the_dags_review(airflow_db):
    from pathlib import Path

    from airflow.dag_processing.dagbag import DagBag

    dags = Path(__file__).resolve().parents[2] / "dags"
    dag = DagBag(dag_folder=str(dags / "publish_dataset.py")).dags["publish_dataset"]
    (((dag_id, task_id), approve),) = REVIEWS.items()
    assert dag.dag_id == dag_id and approve in dag.get_task(task_id).options
