"""The sample viewer's URLs, in one place: the viewer's pages and the quality reports that link into them
(a report links with a relative prefix, so it works wherever the reports app is mounted)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

# From a report page (<prefix>/reports/<stage>/<run>/) to the viewer (<prefix>/viewer).
FROM_REPORT = "../../../viewer"


class Links:
    """Every URL of the viewer, from the one prefix the app is mounted at."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")

    def home(self) -> str:
        return f"{self.base}/"

    def release(self, version_id: str, **query: Any) -> str:
        return f"{self.base}/releases/{quote(version_id)}/" + _query(query)

    def sample(self, version_id: str, sample_id: str) -> str:
        return f"{self.base}/releases/{quote(version_id)}/samples/{quote(sample_id, safe='')}"

    def backfill(self, dag_id: str, run_id: str) -> str:
        """One ingest run followed across the chain it woke (``datamind.review.chain``)."""
        return f"{self.base}/backfills/{quote(dag_id, safe='')}/{quote(run_id, safe='')}/"

    def run(self, run_id: str, kind: str, **query: Any) -> str:
        return f"{self.base}/runs/{quote(run_id, safe='')}/{kind}/" + _query(query)

    def run_item(self, run_id: str, kind: str, key: str) -> str:
        return f"{self.base}/runs/{quote(run_id, safe='')}/{kind}/{quote(key, safe='')}"

    def release_rejections(self, version_id: str, **query: Any) -> str:
        """What the runs that fed a release rejected (recorded since the release before it)."""
        return f"{self.base}/releases/{quote(version_id)}/rejections/" + _query(query)

    def report(self, rel_dir: str) -> str:
        """A quality report (``rel_dir``: its folder under reports/, ``<stage>/<run>``), served beside the viewer."""
        return f"{posixpath.dirname(self.base)}/reports/{quote(rel_dir)}/"


def _query(query: Mapping[str, Any]) -> str:
    kept = {k: v for k, v in query.items() if v not in (None, "") and not (k == "page" and v == 1)}
    return "?" + urlencode(kept) if kept else ""
