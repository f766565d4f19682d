"""The sample viewer behind the reports app: a release's samples filtered and paged from its Parquet files, one
sample as a conversation at a stable link, one run's trajectories and rejections with why, and the audit at
the top of a release's page and report, its misses linked to the samples that count against them."""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime
from urllib.parse import quote

import airflow  # noqa: F401  (puts the plugins folder on sys.path, as in a deployment)
import pytest
from fastapi.testclient import TestClient
from release_builder import OFFLINE_EXPERT, TEACHER, sample_row, write_release, write_run

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
    # v1's quality report, as publish_dataset's run writes it (the folder is the run id made safe)
    root.write_text(
        "reports/publish_dataset/manual__publish_v1/summary.json",
        json.dumps({"stage": "publish_dataset", "run_id": "manual__publish_v1", "release": {"version_id": "v1"}}),
    )
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


def _text(page: str) -> str:
    """What the screen says: the page without its markup, whitespace folded."""
    inline = re.sub(r"</?(?:a|b|span|code)\b[^>]*>", "", page)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", inline)))


def test_a_release_page_shows_what_changed_since_the_release_before_it(client):
    page = client.get("/viewer/releases/v2/").text
    changed = page[page.index("id='changes'") : page.index("id='samples'")]
    said = _text(changed)
    assert "What changed since v1" in said
    assert "Since v1: 0 samples added, 230 dropped (260 -> 30)." in said
    # per file, by name: v2 keeps files 0-29 (fewer samples each) and no longer has 30-39
    (row,) = [r for r in changed.split("<tr>") if ">orders_35.csv" in r]
    assert "no longer in it" in row and re.findall(r"class='num'>([^<]*)<", row) == ["6", "0", "", "-6"]
    (kept,) = [r for r in changed.split("<tr>") if ">orders_3.csv<" in r]
    assert re.findall(r"class='num'>([^<]*)<", kept) == ["7", "1", "", "-6"]
    assert "href='/datamind/viewer/releases/v2/?file_id=f003'" in kept  # a changed file opens its samples
    assert "Per category and hop" in said and "Audit figures that moved" in said
    assert "repeated_word_question_share" in changed[changed.index("Audit figures that moved") :]
    first = _text(client.get("/viewer/releases/v1/").text)
    assert "First release: 260 samples from 40 files." in first


def test_the_release_page_links_to_its_report_its_samples_and_what_its_runs_rejected(client):
    page = client.get("/viewer/releases/v1/").text
    assert "<a href='/datamind/reports/publish_dataset/manual__publish_v1/'>Quality report of this release</a>" in page
    assert "<a href='#samples'>browse its samples</a>" in page and "<h2 id='samples'>" in page
    assert "<a href='/datamind/viewer/releases/v1/rejections/'>Rejections on the way to it</a>" in page
    assert "No quality report names this release." in client.get("/viewer/releases/v2/").text
    home = client.get("/viewer/").text
    assert "rejections of its run" not in home and home.count("rejections on the way to it") == 2


def test_the_file_filter_shows_file_names_and_a_file_is_found_by_its_name(client):
    page = client.get("/viewer/releases/v1/").text
    assert re.search(r"<option value='f012'>orders_12\.csv \(f012\) \(\d+\)</option>", page)
    assert "search question / file name" in page
    found = client.get("/viewer/releases/v1/?q=orders_12.csv").text
    assert _ids(found) == [f"s{i:07d}" for i in range(12, N, 40)]
    assert "<td>orders_12.csv</td>" in found  # the listing names each sample's file


def test_the_written_by_filter_lists_each_writer_with_its_count_and_a_sample_says_who_wrote_it(client):
    page = client.get("/viewer/releases/v1/").text
    form = page[page.index("<form") : page.index("</form>")]
    assert "written by<select name='model'>" in form and "question by<select name='question_model'>" in form
    teacher, offline = _expected(model=TEACHER), _expected(model=OFFLINE_EXPERT)
    assert (len(teacher), len(offline)) == (98, 162)  # the builder's two writers
    assert f"<option value='{TEACHER}'>{TEACHER} (98)</option>" in form
    assert f"<option value='{OFFLINE_EXPERT}'>{OFFLINE_EXPERT} (162)</option>" in form
    assert "<option value='offline'>offline (195)</option>" in form  # questions: the offline engine's
    for model, want in ((TEACHER, teacher), (OFFLINE_EXPERT, offline)):
        got = client.get(f"/viewer/releases/v1/?model={model}").text
        assert f"{len(want):,} matching samples" in got and _ids(got) == want[:50]
        assert f"<option value='{model}' selected>" in got
        listed = got[got.index("matching samples") :]
        assert listed.count(f"<td>{model}</td>") == 50 and listed.count("<td>offline-expert</td>") in (0, 50)
    # the teacher's trajectories on questions the offline engine wrote: the sample says both
    mixed = _expected(model=TEACHER, question_model="offline")
    got = client.get(f"/viewer/releases/v1/?model={TEACHER}&question_model=offline").text
    assert f"{len(mixed):,} matching samples" in got and _ids(got) == mixed[:50] and len(mixed) == 33
    one = _text(client.get(f"/viewer/releases/v1/samples/{mixed[0]}").text)
    assert f"written by (model) {TEACHER}" in one and "question by (question_model) offline" in one
    assert client.get("/viewer/releases/v1/?model=gpt-9").status_code == 400  # no sample of that writer
    # the audit above the samples counts them per writer, each count opening those samples
    table = page[page.index("Samples by writer") :].split("</table>")[0]
    rows = [_text(r).strip() for r in table.split("<tr>")[2:]]
    assert rows == [
        f"{OFFLINE_EXPERT} offline 162",
        f"{TEACHER} {TEACHER} 65",
        f"{TEACHER} offline 33",
    ]
    href = html.unescape(re.findall(r"href='([^']+)'", table)[2])
    assert href == f"/datamind/viewer/releases/v1/?model={TEACHER}&question_model=offline#samples"
    assert _ids(client.get(href.removeprefix("/datamind").split("#")[0]).text) == mixed[:50]


def test_a_figure_not_judged_says_why(client):
    page = client.get("/viewer/releases/v2/").text
    row = page[page.index("<td>distinct_first_think_ratio") :].split("</tr>")[0]
    assert "not judged: judged on 500+ samples only; this release has 30" in _text(row)


def test_trajectories_the_judge_did_not_select_are_not_shown_as_rejections(client):
    run = quote(RUN, safe="")
    rejections = client.get(f"/viewer/runs/{run}/rejections/").text
    assert "judged-dropped" in rejections and "q0000009" in rejections and "traj-not-kept" not in rejections
    assert "2 matching rows" in rejections and "not_selected" not in rejections.split("<form")[1]
    assert f"href='/datamind/viewer/runs/{run}/not_selected/'>Trajectories not selected of this run" in rejections
    others = client.get(f"/viewer/runs/{run}/not_selected/").text
    assert "Trajectories not selected of run" in others and "they are not rejections" in others
    assert "traj-not-kept" in others and "judged-dropped" not in others
    one = _text(client.get(f"/viewer/runs/{run}/not_selected/traj-not-kept").text)
    assert "Not selected: not_selected" in one and "Not a rejection" in one and "Rejected:" not in one


def test_the_rejections_on_the_way_to_a_release_are_those_of_the_runs_that_fed_it(client):
    page = client.get("/viewer/releases/v1/rejections/").text
    said = _text(page)
    assert "Rejections on the way to v1" in said and "from the start up to the publication of v1" in said
    assert "2 matching rows" in said and "traj-not-kept" not in page
    links = re.findall(r"href='(/datamind/viewer/runs/[^']+/rejections/[^']+)'", page)
    assert len(links) == 2 and all(client.get(link.removeprefix("/datamind")).status_code == 200 for link in links)
    # v2 was published at the same instant as v1 here: nothing was rejected between them
    assert "0 matching rows" in client.get("/viewer/releases/v2/rejections/").text


def test_after_a_decision_the_report_the_index_and_the_viewer_all_say_which_way_by_whom_and_when(tmp_path, monkeypatch):
    from datamind.publish import promotion
    from datamind.quality.report_index import rebuild_index
    from datamind.quality.report_page import render_report

    root = DataRoot(str(tmp_path / "data"))
    manifest = write_release(root, 1, 60, flawed=True)
    report = "reports/publish_dataset/manual__publish_v1"
    doc = {"stage": "publish_dataset", "run_id": "manual__publish_v1", "table": "dataset", "success": True,
           "created_at": "2026-11-27T00:00:00+00:00", "release": promotion.release_summary(manifest)}  # fmt: skip
    root.write_text(f"{report}/summary.json", json.dumps(doc))
    root.write_text(f"{report}/report.html", render_report(doc, {}))
    rebuild_index(root)
    monkeypatch.setenv("DATAMIND_DATA_ROOT", root.url)
    app = reports_app.create_app()
    app.dependency_overrides[reports_app._logged_in] = lambda: None
    client = TestClient(app)
    assert "awaiting_approval" in _text(client.get("/reports/publish_dataset/manual__publish_v1/").text)

    when = datetime(2026, 11, 28, 9, 30, tzinfo=UTC)
    promotion.decide(root, 1, approved=True, user="ada", comment="doubled words are cosmetic", now=when)
    said = "promoted: approved by ada at 2026-11-28T09:30:00+00:00: doubled words are cosmetic"
    pages = {
        "report": client.get("/reports/publish_dataset/manual__publish_v1/").text,
        "index": client.get("/reports/").text,
        "viewer release": client.get("/viewer/releases/v1/").text,
        "viewer home": client.get("/viewer/").text,
        "report.html on disk": root.read_text(f"{report}/report.html"),
        "index.html on disk": root.read_text("reports/index.html"),
    }
    for name, page in pages.items():
        assert said in _text(page), name
        assert "awaiting_approval" not in page, name
    assert json.loads(root.read_text(f"{report}/summary.json"))["release"]["promotion"]["decided_by"] == "ada"
