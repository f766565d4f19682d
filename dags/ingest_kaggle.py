"""
### Ingest Kaggle: weekly crawl of CSV/XLSX datasets

Searches Kaggle with the official `kaggle` client for each configured **query**, keeps datasets
whose **license** is allowed and whose size fits the caps, downloads their CSV/XLSX files (pinned
to the listed version) and records provenance: dataset ref, version, license, URL, title.

* Credentials: the Airflow Connection `kaggle_default` (login = username, password = key, or
  `{"api_token": ...}` in extra), else the standard `KAGGLE_*` variables / `~/.kaggle` files.
* 429s and network errors back off (honouring `Retry-After`) and retry; a dataset that keeps
  failing is recorded in `rejections/` (stage `ingest_kaggle`) and the crawl goes on.
* Dataset versions already in the catalog are skipped; the same version is never downloaded twice.

* Scheduled and backfill runs crawl their own interval: only datasets last updated inside the run's
  data interval are taken (newest-updated first), so a backfill over a date range fetches each week
  once. Manual runs crawl what is there now (form field *Crawl window*).

Landed files go to `landing/kaggle/<owner>/<dataset>/<version>/` under the data root, then through
the same filtering as every source into `catalog/files`, which triggers **profile_files**.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta

import pendulum
from airflow.sdk import CronTriggerTimetable, dag, get_current_context

from datamind.ingest.kaggle_config import KaggleCrawlConfig
from datamind.ingest.params import KaggleRun
from datamind_airflow import DAG_DEFAULTS, runtime
from datamind_airflow.ingest_tasks import ingest_form, ingest_shard, plan_source_files, publish_catalog, read_form
from datamind_airflow.lineage import task

log = logging.getLogger(__name__)


@dag(
    # Monday 00:00 UTC, each run covering the week before it (its data interval), so backfills window by week.
    schedule=CronTriggerTimetable("0 0 * * 1", timezone="UTC", interval=timedelta(weeks=1)),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=__doc__,
    tags=["datamind", "ingest"],
    params=ingest_form(KaggleCrawlConfig, KaggleRun),
    **DAG_DEFAULTS,
)
def ingest_kaggle():
    @task(retries=3)
    def crawl() -> list[dict]:
        """Search, filter and download; land files under the data root and plan them into shards."""
        from datamind.ingest.kaggle import KaggleAuthError
        from datamind.ingest.kaggle_config import KaggleCredentials, crawl_window
        from datamind.ingest.kaggle_stage import crawl_to_landing

        context = get_current_context()
        run_type = str(getattr(context["dag_run"].run_type, "value", context["dag_run"].run_type))
        with runtime.fail_fast_on_permanent_errors("Kaggle crawl window"):
            limits, run, form = read_form(context["params"], KaggleRun, KaggleCrawlConfig)
            window = crawl_window(
                run.crawl_window, run_type, context.get("data_interval_start"), context.get("data_interval_end")
            )
            config = replace(form, **window)
        if config.windowed:
            log.info("crawling datasets last updated in [%s, %s)", config.updated_since, config.updated_before)
        conn = runtime.connection_dict(run.kaggle_conn_id)
        credentials = (
            KaggleCredentials.from_connection(conn.get("login"), conn.get("password"), conn.get("extra"))
            if conn
            else None
        )
        # missing or refused credentials will not fix themselves between retries
        with runtime.fail_fast_on_permanent_errors("Kaggle crawl", also=(KaggleAuthError,)):
            files, summary = crawl_to_landing(runtime.data_root(), config, credentials, limits, runtime.run_id())
        runtime.log_summary("Kaggle crawl", summary)
        return plan_source_files(files, "kaggle", run.shard_size)

    summaries = ingest_shard.expand(spec=crawl())
    publish_catalog(summaries, source_name="kaggle")


ingest_kaggle()
