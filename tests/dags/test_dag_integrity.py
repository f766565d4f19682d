"""Every DAG loads, and follows the project's policies (one DAG per file, docs, retries, thin files)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAG_FILES = sorted(p for p in (REPO / "dags").glob("*.py") if not p.name.startswith("_"))
# Parse-time imports that would slow every scheduler loop or need credentials.
HEAVY = {
    "pandas",
    "numpy",
    "great_expectations",
    "torch",
    "transformers",
    "kaggle",
    "openai",
    "duckdb",
    "pyarrow",
    "datasets",
}


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return (
        DagBag(dag_folder=str(REPO / "dags"), include_examples=False)
        if "include_examples" in DagBag.__init__.__code__.co_varnames
        else DagBag(dag_folder=str(REPO / "dags"))
    )


def test_no_import_errors(dagbag):
    assert dagbag.import_errors == {}, dagbag.import_errors


def test_one_dag_per_file_named_after_it(dagbag):
    by_file = {}
    for dag_id, dag in dagbag.dags.items():
        by_file.setdefault(Path(dag.fileloc).stem, []).append(dag_id)
    for path in DAG_FILES:
        assert by_file.get(path.stem) == [path.stem], f"{path.name} defines {by_file.get(path.stem)}"


@pytest.mark.parametrize("path", DAG_FILES, ids=lambda p: p.stem)
def test_dag_policies(dagbag, path):
    dag = dagbag.dags[path.stem]
    assert dag.doc_md and len(dag.doc_md.strip()) > 80, "doc_md must explain the DAG to a data engineer"
    assert "datamind" in dag.tags
    assert dag.max_active_runs == 1
    for t in dag.tasks:
        assert t.retries >= 1, f"{t.task_id} has no retries"
    for name, param in dag.params.items():
        schema = param.schema if hasattr(param, "schema") else {}
        assert schema.get("title") or schema.get("description"), f"param {name} has no title for the trigger form"


@pytest.mark.parametrize("path", DAG_FILES, ids=lambda p: p.stem)
def test_dag_files_import_nothing_heavy_at_parse_time(path):
    tree = ast.parse(path.read_text())
    for node in tree.body:  # module level only; task bodies import what they need
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            assert name.split(".")[0] not in HEAVY, f"{path.name} imports {name} at module level"


def _asset_uris(condition):
    if condition is None:
        return
    if getattr(condition, "uri", None):
        yield condition.uri
    for child in getattr(condition, "objects", []) or []:
        yield from _asset_uris(child)


def test_assets_chain_the_pipeline(dagbag):
    """Each stage is scheduled on the Asset its upstream stage emits."""
    produced = {}
    for dag in dagbag.dags.values():
        for t in dag.tasks:
            for outlet in getattr(t, "outlets", []) or []:
                produced.setdefault(outlet.uri, set()).add(dag.dag_id)
    expected = {
        "profile_files": "datamind://catalog/files",
        "synthesize_queries": "datamind://catalog/tables",
    }
    for dag_id, uri in expected.items():
        dag = dagbag.dags[dag_id]
        scheduled_on = set(_asset_uris(getattr(dag.timetable, "asset_condition", None)))
        assert uri in scheduled_on, f"{dag_id} is not scheduled on {uri}"
        assert produced.get(uri), f"nothing emits {uri}"


# Each DAG's form and the dataclasses it is generated from ("Class[field]": that field only). Every field of
# every form is here: nothing on a form is written by hand.
FORMS = {
    "ingest_files": ["datamind.settings:Limits", "datamind.ingest.params:FilesSource"],
    "ingest_bird": ["datamind.settings:Limits", "datamind.ingest.params:BirdSource"],
    "ingest_kaggle": [
        "datamind.settings:Limits",
        "datamind.ingest.kaggle_config:KaggleCrawlConfig",
        "datamind.ingest.params:KaggleRun",
    ],
    "profile_files": ["datamind.profile.params:ProfileParams"],
    "synthesize_queries": [
        "datamind.synth.params:SynthParams",
        "datamind.llm.config:ConnectionForm",
        "datamind.llm.config:RequestForm",
    ],
    "sample_trajectories": ["datamind.agent.params:RolloutParams", "datamind.llm.config:ConnectionForm"],
    "judge_trajectories": [
        "datamind.agent.params:RolloutParams[backend]",
        "datamind.judge.params:JudgeParams",
        "datamind.llm.config:ConnectionForm",
        "datamind.llm.config:RequestForm",
    ],
    "publish_dataset": ["datamind.publish.params:PublishParams"],
    "train_agent": ["datamind.train.config:LaunchParams"],
    "evaluate_agent": ["datamind.evaluate.params:EvalParams", "datamind.llm.config:RequestForm"],
}
# Form defaults a deployment sets (the dataclass default stands for "none configured").
DEPLOYMENT_DEFAULTS = {("evaluate_agent", "suites")}


def _form_classes(dag_id: str) -> list[tuple[type, set[str]]]:
    """(class, its fields on the form) per entry of FORMS."""
    import importlib

    from datamind.stage_params import form_schema

    out = []
    for entry in FORMS[dag_id]:
        path, _, only = entry.partition("[")
        module, _, name = path.partition(":")
        cls = getattr(importlib.import_module(module), name)
        out.append((cls, {only.rstrip("]")} if only else set(form_schema(cls))))
    return out


def test_the_forms_table_names_every_dag(dagbag):
    assert set(FORMS) == set(dagbag.dag_ids)


@pytest.mark.parametrize("dag_id", sorted(FORMS))
def test_every_form_field_is_a_dataclass_field(dagbag, dag_id):
    """The form holds exactly the listed dataclasses' form fields: none written by hand beside them, none missing."""
    declared = [name for _, names in _form_classes(dag_id) for name in names]
    assert len(declared) == len(set(declared)), f"{dag_id}: a field is declared twice"
    assert set(dagbag.dags[dag_id].params) == set(declared)


def test_the_review_form_is_its_dataclass(dagbag):
    from datamind.publish.params import ReviewForm
    from datamind.stage_params import form_schema

    review = dagbag.dags["publish_dataset"].get_task("review")
    assert set(review.params) == set(form_schema(ReviewForm))


def _publish_dag_with(monkeypatch, approvers: str | None):
    from airflow.dag_processing.dagbag import DagBag

    if approvers is None:
        monkeypatch.delenv("DATAMIND_RELEASE_APPROVERS", raising=False)
    else:
        monkeypatch.setenv("DATAMIND_RELEASE_APPROVERS", approvers)
    return DagBag(dag_folder=str(REPO / "dags" / "publish_dataset.py"))


def test_only_the_deployments_approvers_may_answer_the_review(monkeypatch):
    """The review task carries DATAMIND_RELEASE_APPROVERS as Airflow's assigned users, and Airflow's check
    (the one its HITL route runs before it takes an answer) lets the named user answer and refuses an admin
    who is not named; without the setting the task names nobody and Airflow skips that check."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    bag = _publish_dag_with(monkeypatch, "ada=Ada L., grace")
    assert bag.import_errors == {}
    review = bag.dags["publish_dataset"].get_task("review")
    assert review.assigned_users == [{"id": "ada", "name": "Ada L."}, {"id": "grace", "name": "grace"}]
    assert review.hitl_summary["assigned_users"] == review.assigned_users  # what the task records for the UI
    assigned = {u["id"] for u in review.assigned_users}  # as the route builds it from the task's HITL detail
    auth = SimpleAuthManager()
    ada = SimpleAuthManagerUser(username="ada", role="user")
    admin = SimpleAuthManagerUser(username="admin", role="admin")
    assert auth.is_authorized_hitl_task(assigned_users=assigned, user=ada)
    assert not auth.is_authorized_hitl_task(assigned_users=assigned, user=admin)

    assert _publish_dag_with(monkeypatch, None).dags["publish_dataset"].get_task("review").assigned_users is None


def test_the_api_refuses_a_review_answer_from_a_user_who_is_not_an_approver(monkeypatch, airflow_db):
    """Through Airflow's own REST route (PATCH .../hitlDetails) as two signed-in users: an admin who is not
    named gets 403 and the review stays unanswered; the named approver's answer is taken. The task's HITL
    row carries the review task's assigned users, as its execute() records them."""
    import uuid

    import pendulum
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import sync_bag_to_db
    from airflow.models.hitl import HITLDetail
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType
    from fastapi.testclient import TestClient

    bag = _publish_dag_with(monkeypatch, "ada=Ada L.")
    review = bag.dags["publish_dataset"].get_task("review")
    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(bag, "dags-folder", None)
    run_id = f"approvers-{uuid.uuid4().hex[:8]}"
    with create_session() as session:
        dag = SerializedDagModel.get_dag("publish_dataset", session=session)
        run = dag.create_dagrun(
            run_id=run_id,
            run_after=pendulum.now("UTC"),
            run_type=DagRunType.MANUAL,
            triggered_by=DagRunTriggeredByType.TEST,
            state=DagRunState.RUNNING,
            session=session,
        )
        ti = run.get_task_instance("review", session=session)
        session.add(HITLDetail(ti_id=ti.id, options=review.options, subject="review", params={},
                               assignees=review.assigned_users))  # fmt: skip
    client, auth = TestClient(create_app("core")), get_auth_manager()
    url = f"/api/v2/dags/publish_dataset/dagRuns/{run_id}/taskInstances/review/-1/hitlDetails"

    def answer(user: str, role: str):
        token = auth.generate_jwt(SimpleAuthManagerUser(username=user, role=role))
        return client.patch(url, json={"chosen_options": ["Approve"], "params_input": {"comment": "ok"}},
                            headers={"Authorization": f"Bearer {token}"})  # fmt: skip

    refused = answer("admin", "admin")
    assert refused.status_code == 403 and "not a respondent" in refused.text
    taken = answer("ada", "user")
    assert taken.status_code == 200, taken.text
    assert taken.json()["responded_by"] == {"id": "ada", "name": "ada"}  # who decided, as promote() records it


def test_a_malformed_approvers_setting_is_the_dags_import_error(monkeypatch):
    bag = _publish_dag_with(monkeypatch, "ada,=Ann")
    assert "publish_dataset" not in bag.dags
    (error,) = bag.import_errors.values()
    assert "DATAMIND_RELEASE_APPROVERS" in error and "names no user id" in error


@pytest.mark.parametrize("dag_id", sorted(FORMS))
def test_form_defaults_equal_the_stage_dataclass_defaults(dagbag, dag_id):
    """A run from the form and a run from Python must fingerprint the same, so one reuses the other's work."""
    from datamind.stage_params import StageParams, form_schema

    params = dagbag.dags[dag_id].params
    for cls, names in _form_classes(dag_id):
        schema = form_schema(cls)
        for name in sorted(names - {f for d, f in DEPLOYMENT_DEFAULTS if d == dag_id}):
            assert params[name] == schema[name]["default"], (dag_id, name, params[name], schema[name]["default"])
        # (evaluation's dataclass has no default suites: the deployment's form supplies them)
        if issubclass(cls, StageParams) and names == set(schema) and cls.__name__ != "EvalParams":
            assert cls.from_form({k: params[k] for k in names}).fingerprint == cls().fingerprint


@pytest.mark.parametrize("dag_id", sorted(FORMS))
def test_form_fields_are_the_dataclass_fields_with_their_ranges(dagbag, dag_id):
    """Every form field has its dataclass field's type, range, choices and pattern, and a value the form refuses
    is one the dataclass refuses too."""
    import dataclasses

    from airflow.sdk.definitions.param import Param as SdkParam
    from airflow.sdk.exceptions import ParamValidationError

    from datamind.stage_params import form_schema

    params = dagbag.dags[dag_id].params
    for cls, names in _form_classes(dag_id):
        schema_of = form_schema(cls)
        # a valid instance to vary one field of (the evaluation needs a suite)
        base = {"suites": {"heldout": ""}} if any(f.name == "suites" for f in dataclasses.fields(cls)) else {}
        for field_name in sorted(names):
            spec, schema = schema_of[field_name], params.get_param(field_name).schema
            for key in ("type", "minimum", "maximum", "enum", "items", "title", "pattern", "minLength", "minItems"):
                assert schema.get(key) == spec.get(key), (dag_id, field_name, key, schema.get(key), spec.get(key))
            bad = None
            if "maximum" in spec:
                bad = spec["maximum"] + 1
            elif "pattern" in spec:
                bad = "Not A Name!"
            elif spec.get("minItems"):
                bad = []
            if bad is None:
                continue
            with pytest.raises(ParamValidationError):
                SdkParam(bad, **dict(schema)).resolve()
            with pytest.raises(ValueError, match=field_name):
                cls(**{**base, field_name: bad})


def test_every_dag_is_wired_as_the_stage_catalog_says(dagbag):
    """Schedules and outlets come from datamind.stages: a stage is woken by the table it reads and announces the
    table it writes, and every DAG file is a stage of the catalog."""
    from datamind.stages import ASSET_OF, PIPELINE

    assert {s.dag_id for s in PIPELINE} == {p.stem for p in DAG_FILES}
    for stage in PIPELINE:
        dag = dagbag.dags[stage.dag_id]
        emitted = {o.uri.rstrip("/") for t in dag.tasks for o in (getattr(t, "outlets", None) or [])}
        if stage.writes in ASSET_OF:  # evaluation results end the chain: nothing waits for them
            assert ASSET_OF[stage.writes] in emitted, f"{stage.dag_id} never announces {stage.writes}"
        scheduled_on = {u.rstrip("/") for u in _asset_uris(getattr(dag.timetable, "asset_condition", None))}
        if stage.reads is None:
            assert not scheduled_on, f"{stage.dag_id} is Asset-scheduled but the catalog says it reads no table"
        else:
            assert scheduled_on == {ASSET_OF[stage.reads]}, (stage.dag_id, scheduled_on)


def _code_lines(path: Path) -> list[str]:
    """A DAG file's code, one stripped line each: no docstring, imports, comments or lines of brackets only."""
    source = path.read_text()
    tree = ast.parse(source)
    start = tree.body[1].lineno if ast.get_docstring(tree) else 1
    return [
        s
        for s in (line.strip() for line in source.splitlines()[start - 1 :])
        if any(c.isalnum() for c in s) and not s.startswith(("#", "import ", "from "))
    ]


def test_dag_files_are_thin_and_share_no_copied_code():
    """A DAG file wires tasks: a task body longer than 40 lines is logic that belongs in the package (tested
    there), and lines two DAG files share belong in the plugin (issue 48: publish_dataset held its release logic,
    ingest_bird and ingest_files shared their plan and wiring)."""
    import difflib
    import itertools

    long_tasks = [
        (path.name, node.name, node.end_lineno - node.lineno + 1)
        for path in DAG_FILES
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name != path.stem and node.end_lineno - node.lineno >= 40
    ]
    assert not long_tasks, long_tasks
    code = {path.name: _code_lines(path) for path in DAG_FILES}
    shared = {
        (a, b): sum(
            block.size
            for block in difflib.SequenceMatcher(None, code[a], code[b], autojunk=False).get_matching_blocks()
        )
        for a, b in itertools.combinations(sorted(code), 2)
    }
    assert max(shared.values()) <= 8, sorted(shared.items(), key=lambda kv: -kv[1])[:3]
