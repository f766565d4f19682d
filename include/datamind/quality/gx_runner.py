"""The only module that touches Great Expectations: suite (plain data) + frame -> validation result dict.

``great_expectations`` costs over 3 s to import, so it is imported inside ``run_suite``, never at module
import time (DAG files and CLIs import ``datamind.quality`` freely).
"""

from __future__ import annotations

import logging
import os

import pandas as pd

from datamind.quality.suites import Suite

DOCS_SITE = "datamind"
# GX ships onboarding GIFs and marketing images (~3.4 MB) that no Data Docs page links to; only the favicon
# is referenced (styles are inlined, fonts are linked), so the rest is not copied to the data root.
_UNUSED_STATIC = "static/images/"
_KEEP_STATIC = {"static/images/favicon.ico"}


def build_expectations(suite: Suite) -> list:
    import great_expectations.expectations as gxe
    from great_expectations.expectations.row_conditions import Column

    out = []
    for exp in suite.all_expectations():
        cls = getattr(gxe, exp.type, None)
        if cls is None:
            raise ValueError(f"{suite.name}: unknown expectation type {exp.type!r}")
        extra = {}
        if exp.when is not None:
            column, value = exp.when
            extra["row_condition"] = Column(column) == value
        out.append(cls(**exp.kwargs, **extra, notes=exp.why))
    return out


def run_suite(suite: Suite, frame: pd.DataFrame, run_name: str, docs_dir: str | None = None) -> dict:
    """Validate ``frame`` against ``suite`` in an ephemeral context; build Data Docs into ``docs_dir`` if given."""
    gx_logger = logging.getLogger("great_expectations")
    if gx_logger.level == logging.NOTSET:
        # GX logs ~150 INFO lines on import; a task log should show our summary, not its registry chatter.
        gx_logger.setLevel(logging.WARNING)
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    # The default site would write a fresh /tmp folder on every run.
    ctx.delete_data_docs_site("local_site")
    actions = []
    if docs_dir is not None:
        ctx.add_data_docs_site(
            site_name=DOCS_SITE,
            site_config={
                "class_name": "SiteBuilder",
                "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": docs_dir},
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
        actions.append(gx.checkpoint.UpdateDataDocsAction(name="data_docs", site_names=[DOCS_SITE]))

    batch = (
        ctx.data_sources.add_pandas("datamind")
        .add_dataframe_asset(suite.table_name)
        .add_batch_definition_whole_dataframe("whole_table")
    )
    gx_suite = ctx.suites.add(gx.ExpectationSuite(name=suite.name, expectations=build_expectations(suite)))
    definition = ctx.validation_definitions.add(
        gx.ValidationDefinition(name=f"{suite.name}.validation", data=batch, suite=gx_suite)
    )
    checkpoint = ctx.checkpoints.add(
        gx.Checkpoint(
            name=f"{suite.name}.checkpoint",
            validation_definitions=[definition],
            actions=actions,
            result_format={"result_format": "SUMMARY", "partial_unexpected_count": 10},
        )
    )
    result = checkpoint.run(batch_parameters={"dataframe": frame}, run_id=RunIdentifier(run_name=run_name))
    (validation,) = result.run_results.values()
    return validation.to_json_dict()


def docs_files(docs_dir: str) -> list[str]:
    """Relative paths of the Data Docs files worth publishing, sorted."""
    out = []
    for dirpath, _, filenames in os.walk(docs_dir):
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), docs_dir).replace(os.sep, "/")
            if rel.startswith(_UNUSED_STATIC) and rel not in _KEEP_STATIC:
                continue
            out.append(rel)
    return sorted(out)
