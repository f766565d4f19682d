"""OpenLineage events of every stage, through Airflow's own provider (apache-airflow-providers-openlineage).

The DAGs' Python tasks are ``lineage.task`` (a drop-in for ``airflow.sdk.task``): their operator answers the
provider's ``get_openlineage_facets_on_start/complete`` with the tables the task reads and writes, named by
the stage catalog (``datamind.stages``), as datasets of the data root:

* planners read the stage's input table; shard tasks read it and write the output table; the finalisers write
  (validate) the output table; ``publish_dataset`` reads ``judged`` and writes ``dataset/v<N>``; training reads
  the promoted release and writes ``checkpoints``; evaluation reads ``checkpoints`` and writes ``eval_results``;
* facets: the output's schema (the table's declared contract), row counts in and out, and a ``datamind`` run
  facet with the task's counts, rejections by reason, the release's audit verdict, and the prompt template
  versions and models its rows name.

Where the events go is the provider's usual setting: ``bin/env.sh`` defaults it to a file under the data root
(``lineage/events.jsonl``, no server needed); a deployment points ``AIRFLOW__OPENLINEAGE__TRANSPORT`` at
Marquez or any OpenLineage backend instead.
"""

from __future__ import annotations

import functools
import json
import logging
import posixpath
from typing import Any

import attr
from airflow.providers.standard.decorators.python import _PythonDecoratedOperator
from airflow.sdk.bases.decorator import task_decorator_factory

from datamind.assets import DIRS
from datamind.stages import STAGES, contract

log = logging.getLogger(__name__)

# What each task of a stage does with the stage's tables: read its input, write its output.
_ROLES = {
    "plan": ("reads",),
    "process_shard": ("reads", "writes"),
    "ingest_shard": ("reads", "writes"),
    "publish": ("writes",),
    "publish_catalog": ("writes",),
    "export": ("reads",),
    "train": ("writes",),
    "evaluate": ("reads", "writes"),
}


class LineageOperator(_PythonDecoratedOperator):
    """A DAG's Python task that says which tables it read and wrote; after a deferral (batch mode) it runs its
    function again, which steps on (``stages._batched``)."""

    def execute(self, context):
        result = super().execute(context)
        # Built here, in the task's process: the provider asks for it in a short-lived fork with a timeout.
        try:
            self._lineage = task_lineage(self, result)
        except Exception:  # noqa: BLE001 - lineage never fails the task that did the work
            log.warning("no OpenLineage facets for %s.%s", self.dag_id, self.task_id, exc_info=True)
        return result

    def resume(self, context, event: dict | None = None):
        return self.execute(context)

    def get_openlineage_facets_on_start(self):
        return task_lineage(self, None)

    def get_openlineage_facets_on_complete(self, task_instance):
        return getattr(self, "_lineage", None) or task_lineage(self, None)


def task(python_callable=None, **kwargs):
    """``@task`` / ``@task(...)`` whose operator is :class:`LineageOperator`."""
    return task_decorator_factory(python_callable=python_callable, decorated_operator_class=LineageOperator, **kwargs)


@functools.cache
def _facet_class():
    from openlineage.client.generated.base import RunFacet

    @attr.define
    class DatamindRunFacet(RunFacet):
        """What a stage task did: its counts, rejections by reason, audit verdict, templates and models."""

        stage: str
        counts: dict
        rejected: dict
        audit: dict | None
        template_versions: dict | None
        models: list

        @staticmethod
        def _get_schema() -> str:
            return "https://github.com/datamind-dags/spec/facets/1-0-0/DatamindRunFacet.json"

    return DatamindRunFacet


def _run_facet(stage: str, result: dict):
    counts = {k: v for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    rejected = result.get("rejected") or result.get("filtered_by_reason") or result.get("rejections") or {}
    audit = result.get("audit") or {}
    verdict = {k: audit[k] for k in ("passed", "misses", "n_samples") if k in audit} or None
    templates = result.get("template_versions")
    if isinstance(templates, str):
        try:
            templates = json.loads(templates)
        except json.JSONDecodeError:
            templates = {"template": templates}
    models = result.get("models") or ([result["model"]] if result.get("model") else [])
    llm = result.get("llm") or {}
    if isinstance(llm, dict) and isinstance(llm.get("models"), dict):
        models = sorted(set(models) | set(llm["models"]))
    return _facet_class()(
        stage=stage,
        counts=counts,
        rejected=rejected if isinstance(rejected, dict) else {},
        audit=verdict,
        template_versions=templates if isinstance(templates, dict) else None,
        models=sorted(map(str, models)),
    )


def dataset_name(table_dir: str, root_url: str) -> tuple[str, str]:
    """(namespace, name) of a table folder of the data root, as OpenLineage names files: a local root is
    namespace ``file`` and the absolute path; an object store is ``scheme://bucket`` and the key."""
    path = posixpath.join(root_url.rstrip("/"), table_dir)
    if "://" in path and not path.startswith("file://"):
        scheme, rest = path.split("://", 1)
        bucket, _, key = rest.partition("/")
        return f"{scheme}://{bucket}", key
    return "file", path.removeprefix("file://")


def task_lineage(op, result: Any):
    """The OperatorLineage of task ``op`` (its inputs, outputs and facets; ``result`` its return value, None
    at the start)."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.generated.input_statistics_input_dataset import InputStatisticsInputDatasetFacet
    from openlineage.client.generated.output_statistics_output_dataset import OutputStatisticsOutputDatasetFacet
    from openlineage.client.generated.schema_dataset import SchemaDatasetFacet, SchemaDatasetFacetFields

    from datamind.settings import Settings

    stage = STAGES.get(op.dag_id)
    if stage is None or op.task_id not in _ROLES and op.task_id != "promote":
        return OperatorLineage()
    result = result if isinstance(result, dict) else {}
    reads, writes = stage.reads, stage.writes
    if op.dag_id == "publish_dataset":  # a release is its own dataset, dataset/v<N>
        vid = result.get("version_id") or (f"v{result['version']}" if result.get("version") else None)
        writes = f"{DIRS['dataset']}/{vid}" if vid else None
        roles = ("reads", "writes") if op.task_id == "publish" else ("writes",) if op.task_id == "promote" else ()
    else:
        roles = _ROLES.get(op.task_id, ())
        if reads == "dataset" and result.get("version"):  # training reads the promoted release
            v = result["version"]
            reads = f"{DIRS['dataset']}/{v if str(v).startswith('v') else f'v{v}'}"
    root = Settings.from_env().data_root  # never an Airflow Variable: the START event is built in a fork

    def table_dir(table: str | None) -> str | None:
        if table is None:
            return None
        return DIRS.get(table, table)

    inputs, outputs = [], []
    if "reads" in roles and reads:
        namespace, name = dataset_name(table_dir(reads), root)
        items = _spec_items((getattr(op, "op_kwargs", None) or {}).get("spec"))
        stats = {"inputStatistics": InputStatisticsInputDatasetFacet(rowCount=items)} if items and result else {}
        inputs.append(InputDataset(namespace=namespace, name=name, inputFacets=stats))
    if "writes" in roles and writes:
        namespace, name = dataset_name(table_dir(writes), root)
        facets: dict = {}
        schema = _schema(writes) if result else None  # at the start: names only (pyarrow is not imported yet)
        if schema is not None:
            facets["schema"] = SchemaDatasetFacet(
                fields=[SchemaDatasetFacetFields(name=f.name, type=str(f.type)) for f in schema.schema]
            )
        rows = _rows_out(result)
        stats = {"outputStatistics": OutputStatisticsOutputDatasetFacet(rowCount=rows)} if rows is not None else {}
        outputs.append(OutputDataset(namespace=namespace, name=name, facets=facets, outputFacets=stats))
    run_facets = {"datamind": _run_facet(op.dag_id, result)} if result else {}
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets=run_facets)


def _schema(table: str):
    from datamind import schemas

    return schemas.ALL.get(contract(table) if table in DIRS else "dataset")


def _spec_items(spec: Any) -> int | None:
    if not isinstance(spec, dict):
        return None
    for key in ("files", "table_ids", "query_ids"):
        if key in spec:
            return len(spec[key])
    return None


def _rows_out(result: dict) -> int | None:
    for key in ("new_rows", "n_samples", "n_rows", "n_trajectories", "n_queries", "n_judged_samples", "accepted"):
        value = result.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
