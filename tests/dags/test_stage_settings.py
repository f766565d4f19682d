"""A deployment's settings per stage (the Variable ``datamind_settings_<dag_id>``): the form shows them, every run
resolves under them (an Asset-triggered run, with no conf, included), a run's conf overrides them for that run,
and a run that would redo what other settings covered says so in its plan, before any shard runs (issue 47)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from airflow.dag_processing.dagbag import DagBag

from datamind import stage_settings, tables
from datamind.agent.params import RolloutParams
from datamind.assets import DIRS
from datamind.judge.params import JudgeParams
from datamind.schemas import CATALOG_TABLES
from datamind.shards import write_shard
from datamind.storage import DataRoot
from datamind.synth.params import SynthParams

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples" / "files"


def _dag(dag_id: str):
    bag = DagBag(dag_folder=str(REPO / "dags" / f"{dag_id}.py"))
    assert bag.import_errors == {}, bag.import_errors
    return bag.dags[dag_id]


# -- the settings themselves -------------------------------------------------------------------------------------
def test_stored_settings_are_a_json_object_of_the_stages_fields():
    fields = ("queries_per_category", "n_chains")
    assert stage_settings.parse("synthesize_queries", None, fields) == {}
    assert stage_settings.parse("synthesize_queries", " ", fields) == {}
    assert stage_settings.parse("synthesize_queries", '{"n_chains": 3}', fields) == {"n_chains": 3}
    with pytest.raises(
        ValueError, match=r"datamind_settings_synthesize_queries names unknown field\(s\) \['n_chain'\]"
    ):
        stage_settings.parse("synthesize_queries", '{"n_chain": 3}', fields)  # a typo is never a silent default
    with pytest.raises(ValueError, match="is not JSON"):
        stage_settings.parse("synthesize_queries", "{n_chains: 3}", fields)
    with pytest.raises(ValueError, match="must be a JSON object"):
        stage_settings.parse("synthesize_queries", "[1]", fields)


def test_a_run_takes_the_settings_unless_its_conf_names_the_field():
    params = {"queries_per_category": 2, "n_chains": 3, "seed": 0}  # Airflow's: form defaults updated by the conf
    stored = {"queries_per_category": 1, "n_chains": 0}
    asset_run = stage_settings.resolve(params, stored, conf={})
    assert asset_run.params == {"queries_per_category": 1, "n_chains": 0, "seed": 0}
    manual = stage_settings.resolve({**params, "n_chains": 5}, stored, conf={"n_chains": 5})
    assert manual.params == {"queries_per_category": 1, "n_chains": 5, "seed": 0}
    assert manual.from_conf == {"n_chains": 5} and manual.from_settings == {"queries_per_category": 1}
    summary = manual.summary("synthesize_queries")
    assert summary["settings (datamind_settings_synthesize_queries)"] == {"queries_per_category": 1}


# -- the form ---------------------------------------------------------------------------------------------------
def test_the_form_shows_the_deployments_settings_and_says_where_they_live(monkeypatch):
    monkeypatch.setenv("AIRFLOW_VAR_DATAMIND_SETTINGS_SYNTHESIZE_QUERIES", '{"queries_per_category": 1}')
    dag = _dag("synthesize_queries")
    param = dag.params.get_param("queries_per_category")
    assert param.value == 1 and "datamind_settings_synthesize_queries" in param.description
    assert dag.params["n_chains"] == SynthParams().n_chains  # a field the settings do not name keeps its default
    assert "datamind_settings_synthesize_queries" in dag.doc_md and "redoes every item" in dag.doc_md


@pytest.mark.parametrize("value", ['{"queries_per_category": 99}', '{"queries_per_categry": 1}'])
def test_a_setting_the_form_would_refuse_is_the_dags_import_error(monkeypatch, value):
    monkeypatch.setenv("AIRFLOW_VAR_DATAMIND_SETTINGS_SYNTHESIZE_QUERIES", value)
    bag = DagBag(dag_folder=str(REPO / "dags" / "synthesize_queries.py"))
    (error,) = bag.import_errors.values()
    assert "datamind_settings_synthesize_queries" in error


# -- what a run under other settings would redo ----------------------------------------------------------------
def _covered(root: DataRoot, params: SynthParams, table_files: dict[str, str]) -> None:
    """Tables synthesized under ``params``, as synthesis commits them (its summary records the parameters)."""
    rows = [{"table_id": t, "file_id": f, "name": t, "columns": "[]"} for t, f in table_files.items()]
    write_shard(root, CATALOG_TABLES, DIRS["catalog_tables"], [_catalog_row(r) for r in rows], "part-t.parquet")
    tables.queries(root, params.fingerprint).commit("s1", table_files, {}, params=params.to_dict())


def _catalog_row(row: dict) -> dict:
    """``row`` with a placeholder in every other required column."""
    import pyarrow as pa

    def blank(field):
        if pa.types.is_timestamp(field.type):
            return datetime(2026, 1, 1, tzinfo=UTC)
        return 0 if pa.types.is_integer(field.type) or pa.types.is_floating(field.type) else ""

    return {f.name: row.get(f.name, None if f.nullable else blank(f)) for f in CATALOG_TABLES.schema}


def test_a_synthesis_under_other_settings_names_what_it_redoes_and_which_settings_differ(tmp_path):
    root = DataRoot(str(tmp_path / "data"))
    before = SynthParams(queries_per_category=1, n_chains=0)
    _covered(root, before, {"t1": "f1", "t2": "f1", "t3": "f2"})
    assert stage_settings.redo("synthesize_queries", root, before) is None  # the same settings: nothing
    assert stage_settings.redo("synthesize_queries", root, replace(before, shard_size=3)) is None  # no fp

    redo = stage_settings.redo("synthesize_queries", root, SynthParams())  # the defaults, as issue 47 found them
    assert (redo.n_items, redo.n_files) == (3, 2)
    assert redo.by_fingerprint == {before.fingerprint: 3} and redo.fingerprint == SynthParams().fingerprint
    assert redo.differs == {"n_chains": (0, 3), "queries_per_category": (1, 2)}
    message = redo.message()
    assert "will redo 3 tables (2 data files)" in message and "datamind_settings_synthesize_queries" in message
    assert redo.to_dict()["tables_redone"] == 3
    assert stage_settings.redo("sample_trajectories", root, RolloutParams()) is None  # not partitioned by its settings


def test_a_judging_under_other_settings_names_the_queries_it_judges_again(tmp_path):
    root = DataRoot(str(tmp_path / "data"))
    before = JudgeParams(strategy="random_select")
    tables.judged(root, before.partition).commit("s1", ["q1", "q2"], {})
    root.write_text(f"judged/{before.partition}/params.json", json.dumps(before.to_dict()))
    assert stage_settings.redo("judge_trajectories", root, JudgeParams(strategy="random_select")) is None
    redo = stage_settings.redo("judge_trajectories", root, JudgeParams())
    assert redo.n_items == 2 and redo.item == "queries" and redo.by_fingerprint == {before.fingerprint: 2}
    assert redo.differs == {"strategy": ("random_select", JudgeParams().strategy)}


# -- the reproduction, without a browser -----------------------------------------------------------------
SETTINGS = {  # the demo-like deployment: fewer questions than the form's defaults
    "synthesize_queries": {"categories": ["counting", "aggregation"], "queries_per_category": 1, "n_chains": 0},
    "sample_trajectories": {"n_samples": 2},
}


@pytest.fixture
def deployment_settings(airflow_db):
    """The settings stored as bin/demo stores them: Variables in the metadata DB (which a DAG file parsed by
    ``airflow dags test`` cannot read, so the run itself must apply them)."""
    from airflow.models.variable import Variable

    def store(dag_id: str, value: dict) -> None:
        Variable.set(stage_settings.variable_name(dag_id), json.dumps(value))

    for dag_id, value in SETTINGS.items():
        store(dag_id, value)
    yield store
    for dag_id in stage_settings.STAGES:
        Variable.delete(stage_settings.variable_name(dag_id))


def _per_file(data: Path, table: str) -> dict[str, int]:
    rows = duckdb.sql(f"SELECT file_id, count(*) FROM '{data}/{table}/**/*.parquet' GROUP BY 1").fetchall()
    return dict(rows)


def _xcom(run, task_id: str, key: str):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    query = XComModel.get_many(run_id=run.run_id, key=key, dag_ids=run.dag_id, task_ids=task_id)
    with create_session() as session:
        return XComModel.deserialize_value(session.scalars(query).one())


def _plan_settings(run) -> dict:
    """What the run's plan task resolved and said, before any shard ran (its XCom ``settings``)."""
    return _xcom(run, "plan", "settings")


def test_a_backfill_of_new_files_runs_every_later_stage_under_the_deployments_settings(
    deployment_settings, tmp_path, monkeypatch
):
    data = tmp_path / "data"
    monkeypatch.setenv("DATAMIND_DATA_ROOT", str(data))
    root = DataRoot(str(data))
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    for name in ("sales_orders.csv", "wetter_muenchen.csv"):
        shutil.copy(SAMPLES / name, first / name)
    shutil.copy(SAMPLES / "employees_latin1.csv", second / "employees_latin1.csv")
    lines = ["day,region,units,price"] + [
        f"2024-02-{i % 28 + 1:02d},{'nse'[i % 3]},{i * 3 % 41},{i % 7}.5" for i in range(60)
    ]
    (second / "units.csv").write_text("\n".join(lines) + "\n")
    dags = {d: _dag(d) for d in ("ingest_files", "profile_files", "synthesize_queries", "sample_trajectories",
                                 "judge_trajectories")}  # fmt: skip

    def chain(folder: Path, name: str) -> list:
        runs = [dags["ingest_files"].test(run_conf={"source_uri": str(folder), "source_name": name})]
        runs += [dags[d].test() for d in list(dags)[1:]]  # no conf, as an Asset event starts them
        assert [r.state for r in runs] == ["success"] * len(runs), [(r.dag_id, r.state) for r in runs]
        return runs

    chain(first, "first")
    synth = SynthParams.from_form(SETTINGS["synthesize_queries"])
    assert tables.partitions(root, "queries") == [f"params={synth.fingerprint}"]  # the settings, not the defaults
    queries, judged = _per_file(data, "queries"), _per_file(data, "judged")
    assert len(queries) == 2 and len(judged) == 2

    runs = chain(second, "second")
    assert tables.partitions(root, "queries") == [f"params={synth.fingerprint}"]
    queries_after, judged_after = _per_file(data, "queries"), _per_file(data, "judged")
    new_files = set(queries_after) - set(queries)
    assert len(new_files) == 2 and set(judged_after) - set(judged) == new_files
    # the files the first run covered have exactly the rows they had: new samples come from the new files only
    assert {f: queries_after[f] for f in queries} == queries
    assert {f: judged_after[f] for f in judged} == judged
    assert _plan_settings(runs[2])["redo"] is None
    # the judge run's counts and quality check are its own rows: the judged table also holds the first chain's
    judged_result = _xcom(runs[4], "publish", "return_value")
    assert judged_result["new_rows"] == sum(judged_after[f] for f in new_files) == judged_result["n_judged_samples"]

    # A person changes the synthesis settings: the run says, in its plan, what it will redo and why.
    deployment_settings("synthesize_queries", {**SETTINGS["synthesize_queries"], "queries_per_category": 2})
    run = dags["synthesize_queries"].test()
    assert run.state == "success"
    redo = _plan_settings(run)["redo"]
    assert redo["tables_redone"] == 4 and redo["files_redone"] == 4
    assert redo["covered_under"] == {synth.fingerprint: 4}
    assert redo["settings_differ"] == {"queries_per_category": [1, 2]}
    # and a run's conf still overrides the settings for that run: under the earlier settings nothing is redone
    again = dags["synthesize_queries"].test(run_conf={"queries_per_category": 1})
    assert again.state == "success" and _plan_settings(again)["params"]["queries_per_category"] == 1
    assert _plan_settings(again)["redo"] is None
