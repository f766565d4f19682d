"""The sample viewer's URLs, in one place: the viewer's pages and the quality reports that link into them
(a report links with a relative prefix, so it works wherever the reports app is mounted)."""

from __future__ import annotations

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

    def run(self, run_id: str, kind: str, **query: Any) -> str:
        return f"{self.base}/runs/{quote(run_id, safe='')}/{kind}/" + _query(query)

    def run_item(self, run_id: str, kind: str, key: str) -> str:
        return f"{self.base}/runs/{quote(run_id, safe='')}/{kind}/{quote(key, safe='')}"


def _query(query: Mapping[str, Any]) -> str:
    kept = {k: v for k, v in query.items() if v not in (None, "") and not (k == "page" and v == 1)}
    return "?" + urlencode(kept) if kept else ""
