"""The reports app is served in the Airflow UI's origin, where a same-origin request carries the user's session:
nothing a URL or the data root holds may become markup or script there. Every route is enumerated from the
app itself, so a route added later is fuzzed and checked for its login and headers without touching this file."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
from urllib.parse import quote

import airflow  # noqa: F401  (puts the plugins folder on sys.path, as in a deployment)
import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from review.release_builder import sample_row, write_release, write_run

from datamind.agent.protocol import format_answer_turn, format_code_turn, format_interpreter
from datamind.quality.report_page import render_report
from datamind.schemas import DATASET
from datamind.shards import table_to_parquet_bytes
from datamind.storage import DataRoot
from datamind_airflow import reports_app

RUN = "manual__2026-11-28T02:00:00+00:00"
N = 260  # the release the lists page through: 6 pages of 50
PAYLOADS = ("<img src=x onerror=alert(1)>", "\"'><script>alert(1)</script>")
# what would run if a payload reached the page as markup, in any of the forms a payload may take on the way
RAW_MARKUP = re.compile(r"<img\b|<script\b|onerror=alert\(1\)>", re.IGNORECASE)
REPORT_DIR = "synth/hostile"  # under reports/
HOSTILE_VERSION = 3


def _hostile_changes(x: str) -> dict:
    """What changed since a previous release, every name in it markup (file names and sources come from data)."""
    counts = {"before": 1, "after": 2, "added": 1, "dropped": 0}
    return {
        "previous": x, "previous_promotion": x, "headline": x, "more_files": 1,
        "by_source": [{"source": x, **counts}],
        "by_file": [{"file_id": x, "name": x, "source": x, "new_file": True, "gone_file": False, **counts}],
        "by_category_hop": [{"category": x, "hop": x, **counts}],
        "audit": [{"name": x, "before": x, "after": x, "op": x, "bound": x, "ok_before": True, "ok_after": False}],
    }  # fmt: skip


def _hostile_summary() -> dict:
    """A summary.json in which every string a page shows is markup (a worker, a model or a file wrote it)."""
    x = PAYLOADS[0]
    release = {
        "version_id": x,
        "audit": [{"name": x, "value": x, "op": x, "bound": x, "ok": False, "meaning": x, "examples": [x]}],
        "promotion": {"status": x, "decided_by": x, "decided_at": x, "comment": x, "reason": x},
        "failing_figures": [x],
        "changes": _hostile_changes(x),
        "cost": {
            "total": {"prompt_tokens": 1, "completion_tokens": 1, "paid_tokens_per_sample": x,
                      "cached_tokens_per_sample": x, "usd_per_sample": 0.1, "saved_usd": 0.2},
            "by_category_hop": {x: {"samples": x, "paid_tokens_per_sample": x, "cached_tokens_per_sample": x,
                                    "usd_per_sample": 0.1}},
        },
    }  # fmt: skip
    return {
        "table": x,
        "stage": x,
        "run_id": x,
        "created_at": x,
        "success": False,
        "covers_runs": [x],
        "origin": {"dag_id": x, "task_id": x},
        "counts": {x: 3, "reasons": {x: 2}},
        "release": release,
        "statistics": {"evaluated_expectations": x, "successful_expectations": x},
        "summary": {
            "n_rows": x,
            "drop_reasons": [{"stage": x, "reason_code": x, "count": 2}],
            "drop_examples": {x: [{"item": x, "reason": x}]},
            f"by_{x}": {x: 3},
            "category_by_hop": {x: {x: 2}},
            "column_histograms": {x: {"edges": [0, 1], "counts": [4], "nulls": 1}},
            "consistency": {x: 1},
        },
    }


def _hostile_validation() -> dict:
    x = PAYLOADS[1]
    return {"validation": {"results": [{"success": False, "expectation_config": {"type": x, "kwargs": {"column": x}},
                                        "result": {"observed_value": x}}]}}  # fmt: skip


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> DataRoot:
    root = DataRoot(str(tmp_path_factory.mktemp("reports-security")))
    write_release(root, 1, N, shard_rows=100, flawed=True)
    write_run(root, RUN)
    # a release whose samples, facets and manifest are markup
    rows = []
    for i, payload in enumerate(PAYLOADS * 2):
        row = sample_row(i, random.Random(i))
        row.update(question=payload, final_answer=payload, reference_answer=payload, judge_reasoning=payload,
                   category=payload, file_id=payload, sample_id=f"s{i:07d}")  # fmt: skip
        row["messages"] = [
            {"role": "system", "content": payload},
            {"role": "user", "content": payload},
            {"role": "assistant", "content": format_code_turn(payload, f"execute_sql({payload!r})")},
            {"role": "tool", "content": format_interpreter(payload)},
            {"role": "assistant", "content": format_answer_turn(payload, payload)},
        ]
        rows.append(row)
    manifest = write_release(root, HOSTILE_VERSION, 1)
    root.write_bytes(f"dataset/v{HOSTILE_VERSION}/part-00000.parquet", table_to_parquet_bytes(DATASET.to_table(rows)))
    manifest.update(content_hash=PAYLOADS[0], run_id=PAYLOADS[1], created_at=PAYLOADS[0])
    manifest["promotion"].update(decided_by=PAYLOADS[0], comment=PAYLOADS[1])
    manifest["changes"] = _hostile_changes(PAYLOADS[1])
    manifest["files"] = {p: {"path": f"files/x/{p}"} for p in PAYLOADS}  # the file filter shows these names
    root.write_text(f"dataset/v{HOSTILE_VERSION}/manifest.json", json.dumps(manifest))
    # a report written by a worker: its JSON full of markup, a stored page and Data Docs with script in them
    root.write_text(f"reports/{REPORT_DIR}/summary.json", json.dumps(_hostile_summary()))
    root.write_text(f"reports/{REPORT_DIR}/validation.json", json.dumps(_hostile_validation()))
    root.write_text(f"reports/{REPORT_DIR}/report.html", "<script>alert('stored')</script>")
    root.write_text("reports/index.html", "<script>alert('stored index')</script>")
    root.write_text(f"reports/{REPORT_DIR}/data_docs/index.html", "<html><script>alert(document.cookie)</script>")
    return root


def _app(root, monkeypatch, *, logged_in: bool = True):
    monkeypatch.setenv("DATAMIND_DATA_ROOT", root.url)
    app = reports_app.create_app()
    if logged_in:
        app.dependency_overrides[reports_app._logged_in] = lambda: None
    return app


@pytest.fixture()
def client(root, monkeypatch):
    return TestClient(_app(root, monkeypatch))


def _assert_safe(response) -> None:
    """What every answer of the app must be, whatever it was asked."""
    where = f"{response.request.method} {response.request.url} -> {response.status_code}"
    assert response.status_code < 500, where
    csp = response.headers.get("content-security-policy", "")
    assert "frame-ancestors 'self'" in csp, where
    assert "default-src 'none'" in csp and "script-src" not in csp, where
    assert response.headers.get("x-content-type-options") == "nosniff", where
    assert response.headers.get("x-frame-options") == "SAMEORIGIN", where
    if response.headers.get("content-type", "").startswith("text/html") and "sandbox" not in csp:
        assert not RAW_MARKUP.search(response.text), (where, RAW_MARKUP.search(response.text))


# -- finding 1: reflected XSS on the "no report yet" page ----------------------------------------------------
def test_the_no_report_page_shows_its_path_as_text(client):
    hop = client.get("/task/%3Cimg%20src=x%20onerror=alert(document.domain)%3E/r/publish")
    assert hop.status_code == 404 and hop.headers["content-type"].startswith("text/html")
    assert "<img" not in hop.text
    assert "Task &lt;img src=x onerror=alert(document.domain)&gt;.publish of run r" in hop.text
    _assert_safe(hop)


def test_a_run_id_that_leaves_no_folder_name_is_not_an_error(client):
    """path_segment refuses a run id with nothing safe in it ("..."): no report, not a 500."""
    assert client.get("/task/d/.../publish").status_code == 404


# -- finding 5: the API docs answered anonymously ------------------------------------------------------------
@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"])
def test_there_are_no_api_docs(root, monkeypatch, path):
    anonymous = TestClient(_app(root, monkeypatch, logged_in=False))
    assert anonymous.get(path).status_code == 404


def _filled(route: APIRoute, values: dict[str, str]) -> str:
    url = route.path_format
    for name in route.param_convertors:
        url = url.replace("{" + name + "}", values.get(name, "x"))
    return url


def test_every_route_asks_for_a_login(root, monkeypatch):
    app = _app(root, monkeypatch, logged_in=False)
    anonymous = TestClient(app)
    routes = list(app.routes)
    assert routes and all(isinstance(r, APIRoute) for r in routes), [r.path for r in routes]
    for route in routes:
        answer = anonymous.get(_filled(route, {}))
        assert answer.status_code == 401, route.path
        _assert_safe(answer)


# -- finding 6: a page number duckdb cannot hold was a 500 -----------------------------------------------------
@pytest.mark.parametrize("page", ["99999999999999999999999", "9" * 5000, "7"])
def test_a_page_past_the_last_is_a_400_that_names_the_range(client, page):
    answer = client.get(f"/viewer/releases/v1/?page={page}")
    assert answer.status_code == 400, answer.text[:300]
    assert "pages 1 to 6" in answer.json()["detail"]  # 260 samples, 50 a page
    _assert_safe(answer)


@pytest.mark.parametrize("page", ["abc", "0", "-1", "1.5", "2e3", "١"])
def test_a_page_that_is_not_a_whole_number_from_1_is_a_400(client, page):
    answer = client.get("/viewer/releases/v1/", params={"page": page})
    assert answer.status_code == 400 and "whole number" in answer.json()["detail"]


def test_pages_within_the_range_are_served(client):
    assert "page 6 of 6" in client.get("/viewer/releases/v1/?page=6").text
    assert "page 2 of 6" in client.get("/viewer/releases/v1/?page=002").text
    assert "page 1 of 6" in client.get("/viewer/releases/v1/?page=").text  # the filter form sends empty fields


def test_unknown_parameters_and_filter_values_are_a_400_that_says_what_is_known(client):
    typo = client.get("/viewer/releases/v1/?categroy=aggregation")
    assert typo.status_code == 400 and "'categroy'" in typo.json()["detail"] and "category" in typo.json()["detail"]
    unknown = client.get("/viewer/releases/v1/?category=no-such-category")
    assert unknown.status_code == 400 and "aggregation" in unknown.json()["detail"]
    assert client.get("/viewer/releases/v1/?page=1&page=2").status_code == 400
    assert client.get("/viewer/releases/v1/", params={"q": "x" * 201}).status_code == 400
    # values the table has, the empty "any" the form sends, and a value matching nothing within a run's rows
    assert client.get("/viewer/releases/v1/?category=aggregation&hop=&split=").status_code == 200
    run = quote(RUN, safe="")
    assert client.get(f"/viewer/runs/{run}/trajectories/?status=error").status_code == 200


# -- every route, every parameter ----------------------------------------------------------------------------
def _known_values() -> dict[str, str]:
    """A value for each path parameter that reaches a real page, so a payload in another parameter gets past
    the lookups into the rendering."""
    return {
        "version_id": "v1",
        "sample_id": "s0000001",
        "run_id": quote(RUN, safe=""),
        "kind": "rejections",
        "key": "judged-dropped",
        "dag_id": "synthesize_queries",
        "task_id": "publish",
        "path": REPORT_DIR + "/",
    }


def test_markup_in_any_parameter_of_any_route_never_reaches_a_page(client):
    known = _known_values()
    routes = [r for r in client.app.routes if isinstance(r, APIRoute)]
    assert {name for r in routes for name in r.param_convertors} <= set(known), "give a new parameter a real value"
    query_names = ("page", "q", "category", "hop", "status", "stage", "reason_code", "file_id")
    asked = 0
    for route in routes:
        for payload in PAYLOADS:
            for name in route.param_convertors:
                url = _filled(route, {**known, name: quote(payload, safe="")})
                _assert_safe(client.get(url, follow_redirects=False))
                asked += 1
            base = _filled(route, known)
            for name in (*query_names, payload):
                _assert_safe(client.get(base, params={name: payload}, follow_redirects=False))
                asked += 1
    assert asked > 100


def test_markup_from_the_data_root_is_shown_as_text(client, root):
    pages = {
        "release": client.get(f"/viewer/releases/v{HOSTILE_VERSION}/"),
        "sample": client.get(f"/viewer/releases/v{HOSTILE_VERSION}/samples/s0000000"),
        "releases": client.get("/viewer/"),
        "report": client.get(f"/reports/{REPORT_DIR}/"),
        "index": client.get("/reports/"),
    }
    for name, page in pages.items():
        assert page.status_code == 200, name
        _assert_safe(page)
        assert "&lt;img src=x onerror=alert(1)&gt;" in page.text, name  # shown, as text
    other = client.get(f"/viewer/releases/v{HOSTILE_VERSION}/samples/s0000001")
    _assert_safe(other)
    assert "&#34;&#39;&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in other.text
    # the filter offers the hostile category as an option value, escaped, and filtering by it works
    assert "<option value='&lt;img src=x onerror=alert(1)&gt;'>" in pages["release"].text
    chosen = client.get(f"/viewer/releases/v{HOSTILE_VERSION}/", params={"category": PAYLOADS[1]})
    assert chosen.status_code == 200 and "2 matching samples" in chosen.text
    _assert_safe(chosen)
    # the page the publish stage stores is rendered by the same templates
    stored = render_report(_hostile_summary(), _hostile_validation())
    assert not RAW_MARKUP.search(stored) and "&lt;img src=x onerror=alert(1)&gt;" in stored


def test_a_report_is_rendered_from_its_json_never_served_from_storage(client):
    for url in (f"/reports/{REPORT_DIR}/", f"/reports/{REPORT_DIR}", f"/reports/{REPORT_DIR}/report.html"):
        page = client.get(url)
        assert page.status_code == 200 and "alert('stored')" not in page.text, url
        assert "Great Expectations results" in page.text, url
    index = client.get("/reports/index.html")  # where a report's "All reports" link leads
    assert "stored index" not in index.text and "data quality reports" in index.text


def test_files_of_the_data_root_open_in_a_sandbox_without_script(client):
    docs = client.get(f"/reports/{REPORT_DIR}/data_docs/index.html")
    assert docs.status_code == 200 and docs.headers["content-type"].startswith("text/html")
    directives = [d.strip() for d in docs.headers["content-security-policy"].split(";")]
    assert "sandbox" in directives  # an opaque origin: no cookie, no same-origin API; and no allow-scripts
    assert not any(d.startswith("sandbox ") for d in directives)
    summary = client.get(f"/reports/{REPORT_DIR}/summary.json")
    assert summary.headers["content-type"].startswith("application/json")
    assert summary.json()["stage"] == PAYLOADS[0]
    for answer in (docs, summary):
        _assert_safe(answer)


def test_every_inline_style_is_allowed_by_its_hash_and_nothing_else_inline(client):
    run = quote(RUN, safe="")
    for url in ("/viewer/", "/viewer/releases/v1/", "/viewer/releases/v1/samples/s0000010",
                f"/viewer/runs/{run}/rejections/judged-dropped", f"/reports/{REPORT_DIR}/", "/reports/",
                "/task/d/r/t"):  # fmt: skip
        page = client.get(url)
        csp = page.headers["content-security-policy"]
        styles = re.findall(r"<style>(.*?)</style>", page.text, re.DOTALL)
        assert styles, url
        for css in styles:
            digest = base64.b64encode(hashlib.sha256(css.encode()).digest()).decode()
            assert f"'sha256-{digest}'" in csp, (url, css[:80])
        # the browser would drop these: style attributes and script are not allowed by the policy
        assert not re.search(r"<[^>]+\sstyle=", page.text) and "<script" not in page.text, url
    highlighted = client.get("/viewer/releases/v1/samples/s0000010").text
    assert "class='turn assistant'><div class='role'>assistant</div>" in highlighted
    assert '<span class="kn">import</span>' in highlighted  # the code cell is still highlighted, by classes


def test_errors_and_redirects_carry_the_headers_too(root, monkeypatch):
    app = _app(root, monkeypatch)

    @app.get("/broken")
    def broken():
        raise RuntimeError("a bug")

    client = TestClient(app)
    failed = client.get("/broken")
    assert failed.status_code == 500 and "a bug" not in failed.text
    # the hostile report's own task, of its run: the link redirects to it
    hop = client.get(
        f"/task/{quote(PAYLOADS[0], safe='')}/hostile/{quote(PAYLOADS[0], safe='')}", follow_redirects=False
    )
    assert hop.status_code == 307 and hop.headers["location"].endswith(f"/reports/{REPORT_DIR}/")
    missing = client.get("/viewer/releases/v9/")
    for answer in (failed, hop, missing, client.get("/no-such-route")):
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert "frame-ancestors 'self'" in answer.headers["content-security-policy"]
