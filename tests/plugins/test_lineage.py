"""OpenLineage facets of the stage tasks (datamind_airflow.lineage), without a scheduler: the whole chain's tables
connect, and a finished task names its rows, rejections, schema, audit, templates and models.  The events of a
real multi-worker run, read back from the file transport, are checked in tests/e2e/test_cluster.py."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

pytest.importorskip("airflow.providers.openlineage")

from datamind.schemas import DATASET, QUERIES  # noqa: E402
from datamind_airflow.lineage import dataset_name, task_lineage  # noqa: E402

CHAIN = [
    ("ingest_files", ["plan", "ingest_shard", "publish_catalog"]),
    ("profile_files", ["plan", "process_shard", "publish"]),
    ("synthesize_queries", ["plan", "process_shard", "publish"]),
    ("sample_trajectories", ["plan", "process_shard", "publish"]),
    ("judge_trajectories", ["plan", "process_shard", "publish"]),
    ("publish_dataset", ["publish", "promote"]),
    ("train_agent", ["export", "train"]),
    ("evaluate_agent", ["evaluate"]),
]


@dataclass
class Op:
    dag_id: str
    task_id: str
    op_kwargs: dict = field(default_factory=dict)


def _names(datasets) -> set[str]:
    return {d.name.rsplit("/data/", 1)[-1] for d in datasets}


def test_every_table_of_the_chain_is_one_stage_output_and_the_next_stage_input(monkeypatch, tmp_path):
    monkeypatch.setenv("DATAMIND_DATA_ROOT", str(tmp_path / "data"))
    done = {"version": 1, "n_samples": 5}
    flow = []
    for dag_id, tasks in CHAIN:
        result = done if dag_id in ("publish_dataset", "train_agent") else {"new_rows": 2}
        lineages = [task_lineage(Op(dag_id, t), result) for t in tasks]
        flow.append((dag_id, set().union(*(_names(x.inputs) for x in lineages)),
                     set().union(*(_names(x.outputs) for x in lineages))))  # fmt: skip
    for (a, _, out), (b, into, _) in zip(flow, flow[1:], strict=False):
        assert out & into, f"{a} writes {out}, {b} reads {into}"
    assert [sorted(o) for _, _, o in flow] == [
        ["catalog/files"], ["catalog/tables"], ["queries"], ["trajectories"], ["judged"], ["dataset/v1"],
        ["checkpoints"], ["eval_results"],
    ]  # fmt: skip


def test_a_finished_task_names_its_rows_rejections_schema_templates_and_models(monkeypatch, tmp_path):
    monkeypatch.setenv("DATAMIND_DATA_ROOT", str(tmp_path / "data"))
    spec = {"table_ids": ["t1", "t2", "t3"]}
    summary = {"n_queries": 7, "rejections": {"reference_failed": 2}, "model": "synth-model",
               "template_versions": '{"synth": "query@abc"}'}  # fmt: skip
    lin = task_lineage(Op("synthesize_queries", "process_shard", {"spec": spec}), summary)
    (src,), (out,) = lin.inputs, lin.outputs
    assert src.inputFacets["inputStatistics"].rowCount == 3  # the shard's tables in
    assert out.outputFacets["outputStatistics"].rowCount == 7  # its queries out
    assert [f.name for f in out.facets["schema"].fields] == QUERIES.schema.names
    run = lin.run_facets["datamind"]
    assert run.rejected == {"reference_failed": 2} and run.models == ["synth-model"]
    assert run.template_versions == {"synth": "query@abc"}
    release = task_lineage(
        Op("publish_dataset", "publish"), {"version": 4, "n_samples": 9, "audit": {"passed": False, "misses": ["x"]}}
    )
    assert release.outputs[0].name.endswith("/dataset/v4")
    promoted = task_lineage(Op("publish_dataset", "promote"), {"version_id": "v4", "promotion": {"status": "promoted"}})
    assert promoted.outputs[0].name.endswith("/dataset/v4")  # what promote returns: the release summary
    assert [f.name for f in release.outputs[0].facets["schema"].fields] == DATASET.schema.names
    assert release.run_facets["datamind"].audit == {"passed": False, "misses": ["x"]}
    start = task_lineage(Op("synthesize_queries", "process_shard", {"spec": spec}), None)
    assert start.outputs[0].facets == {} and not start.run_facets  # the start names the tables only


def test_dataset_names_follow_openlineage_naming():
    assert dataset_name("queries", "/srv/data") == ("file", "/srv/data/queries")
    assert dataset_name("queries", "s3://bucket/root") == ("s3://bucket", "root/queries")
