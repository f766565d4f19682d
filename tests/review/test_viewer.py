"""The sample viewer behind the reports app: a release's samples filtered and paged from its Parquet files, one
sample as a conversation at a stable link, one run's trajectories and rejections with why, and the audit at
the top of a release's page and report, its misses linked to the samples that count against them."""

from __future__ import annotations

import re

import airflow  # noqa: F401  (puts the plugins folder on sys.path, as in a deployment)
import pytest
from fastapi.testclient import TestClient
from release_builder import sample_row, write_release, write_run

from datamind.storage import DataRoot
from datamind_airflow import reports_app

N = 260
RUN = "manual__2026-11-27T01:00:00+00:00"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> DataRoot:
    root = DataRoot(str(tmp_path_factory.mktemp("viewer")))
    write_release(root, 1, N, shard_rows=100, flawed=True)
    write_release(root, 2, 30)
    write_run(root, RUN)
    return root


@pytest.fixture()
def client(root, monkeypatch):
    monkeypatch.setenv("DATAMIND_DATA_ROOT", root.url)
    app = reports_app.create_app()
    app.dependency_overrides[reports_app._logged_in] = lambda: None
    return TestClient(app)


def _ids(page: str) -> list[str]:
    """The samples listed in the results table (the audit above it links examples too)."""
    return re.findall(r"/samples/(s\d{7})'", page[page.index("matching samples") :])


def _expected(**conditions) -> list[str]:
    import random

    rng = random.Random(7)
    rows = [sample_row(i, rng, True) for i in range(N)]
    return sorted(r["sample_id"] for r in rows if all(str(r[k]) == str(v) for k, v in conditions.items()))


def test_releases_are_listed_with_their_audit_and_promotion(client):
    page = client.get("/viewer/").text
    assert page.index(">v2<") < page.index(">v1<")  # newest first
    v1_row = page[page.index(">v1<") :]
    assert "miss" in v1_row.split("</tr>")[0] and "awaiting_approval" in v1_row.split("</tr>")[0]


def test_filters_and_pages_come_from_the_files(client):
    want = _expected(category="aggregation", hop=1)
    assert want, "the builder makes aggregation samples of hop 1"
    page = client.get("/viewer/releases/v1/?category=aggregation&hop=1").text
    assert f"{len(want):,} matching samples" in page
    assert _ids(page) == want[:50]
    everything = _expected()
    second = client.get("/viewer/releases/v1/?page=2").text
    assert _ids(second) == everything[50:100] and "page 2 of 6" in second
    found = client.get("/viewer/releases/v1/?q=item+123%29").text
    assert _ids(found) == ["s0000123"]
    # every filter offers its values with their counts over the whole release
    assert re.search(r"<option value='sqlite'>sqlite \((\d+)\)</option>", page)


def test_one_sample_reads_as_a_conversation_at_a_stable_link(client):
    page = client.get("/viewer/releases/v1/samples/s0000042").text
    assert "What is the mean amount for" in page and "(item 42)" in page
    assert "<span" in page.split("import")[0][-400:] or "pd.read_csv" in page  # the code cell, highlighted
    assert "read_csv" in re.sub(r"<[^>]+>", "", page)
    assert "class='turn tool'" in page and "class='answer'" in page
    assert "reference answer" in page
    assert client.get("/viewer/releases/v1/samples/nope").status_code == 404
    assert client.get("/viewer/releases/v9/").status_code == 404
    assert client.get("/viewer/releases/..%2F..%2Fetc/").status_code == 404


def test_the_audit_opens_the_release_page_with_examples_of_each_miss(client):
    page = client.get("/viewer/releases/v1/").text
    audit = page[page.index("audit") : page.index("<form")]
    assert "misses 1: repeated_word_question_share" in audit
    row = audit[audit.index("<td>repeated_word_question_share") :].split("</tr>")[0]
    assert "miss" in row
    linked = re.findall(r"/samples/(s\d{7})'", row)
    assert linked == ["s0000001", "s0000051", "s0000101"]  # the first doubled-word questions, and only those
    clean = client.get("/viewer/releases/v2/").text
    assert "every figure meets its threshold" in clean


def test_a_runs_trajectories_and_rejections_say_why(client):
    from urllib.parse import quote

    run = quote(RUN, safe="")
    listing = client.get(f"/viewer/runs/{run}/trajectories/").text
    assert "traj-ok" in listing and "traj-broken" in listing and "traj-other-run" not in listing
    failed = client.get(f"/viewer/runs/{run}/trajectories/?status=error").text
    assert "traj-broken" in failed and "traj-ok" not in failed
    dropped = client.get(f"/viewer/runs/{run}/rejections/judged-dropped").text
    assert "linguistic:mojibake" in dropped and "the answer holds mojibake" in dropped
    assert "The sample as judged" in dropped and "class='turn assistant'" in dropped
    query_level = client.get(f"/viewer/runs/{run}/rejections/q0000009").text
    assert "no_consensus" in query_level
