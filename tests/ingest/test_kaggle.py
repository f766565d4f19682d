"""The Kaggle crawler end to end: the real ``kaggle`` client against a fake Kaggle API on 127.0.0.1.

Expected values come from the fake server's own catalog (tests/fakes/kaggle_server.py) and by hand:
eight datasets match "sales" (votes 500..30) and two match "weather".
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import socket
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # makes tests/fakes importable as `fakes`

from fakes.kaggle_server import FakeFile, FakeKaggleServer, weekly_catalog  # noqa: E402

from datamind.ingest.kaggle import (  # noqa: E402
    KaggleAuthError,
    KaggleCrawlConfig,
    KaggleCredentials,
    crawl_kaggle,
    seen_key,
)
from datamind.ingest.kaggle_config import license_id  # noqa: E402
from datamind.ingest.kaggle_fetch import RetryPolicy, retry_after_seconds, safe_member_path  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
USER = "tester"
KEY = "kgl-key-7f3a91c0d2e84b56-SECRET"
TOKEN = "KGAT_b81c2d3e4f5a6b7c-SECRET"
MB = 1024 * 1024

# What a default "sales" crawl must produce (page size 3, dataset cap 100 MB, file cap 1 MB):
# frank (10 GB) is filtered by the server's maxSize; heidi's 50 MB huge.csv by our file cap.
EXPECTED_FILES = {
    "alice/retail-sales/3/sales.csv",
    "alice/retail-sales/3/stores.xlsx",
    "bob/sales-forecast/2/data/train.csv",
    "heidi/sales-bigfile/4/small.csv",
}
EXPECTED_COMPLETED = {"alice/retail-sales@3", "bob/sales-forecast@2", "heidi/sales-bigfile@4"}


def config(**overrides) -> KaggleCrawlConfig:
    base = dict(
        queries=["sales"],
        page_size=3,
        max_dataset_bytes=100 * MB,
        max_file_bytes=MB,
        retries=3,
        backoff_base_s=0.001,
        backoff_max_s=2.0,
        request_timeout_s=10,
    )
    base.update(overrides)
    return KaggleCrawlConfig.from_form(base)


CREDS = KaggleCredentials(username=USER, key=KEY)


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch):
    """Any name resolution other than loopback fails the test: nothing may reach kaggle.com."""
    real = socket.getaddrinfo

    def guarded(host, *args, **kwargs):
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise OSError(f"test tried to reach {host!r}")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", guarded)


@pytest.fixture(scope="module")
def server():
    with FakeKaggleServer(username=USER, key=KEY, api_token=TOKEN) as srv:
        yield srv


@pytest.fixture
def kaggle_env(server, tmp_path, monkeypatch):
    """Fresh catalog, HOME in tmp (so ~/.kaggle is never the real one), the client pointed at the fake."""
    server.reset()
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in list(os.environ):
        if var.startswith("KAGGLE_") or var in ("XDG_CONFIG_HOME", "VERBOSE", "VERBOSE_OUTPUT"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("KAGGLE_API_ENVIRONMENT", "LOCALHOST")
    from kagglesdk import kaggle_env as sdk_env

    monkeypatch.setitem(sdk_env._env_to_endpoint, sdk_env.KaggleEnv.LOCAL, server.url)
    return home


@pytest.fixture
def dest(tmp_path) -> Path:
    return tmp_path / "dest"


def files_on_disk(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def by_code(rows, code):
    return {(r["ref"], r.get("file")) for r in rows if r.get("reason_code") == code}


# -- search, paging, filters ----------------------------------------------------------------------------


@pytest.mark.parametrize("tokens", [True, False], ids=["page-tokens", "page-numbers"])
def test_search_pages_through_results_and_applies_policy(kaggle_env, server, dest, tokens):
    server.emit_page_tokens = tokens
    result = crawl_kaggle(config(), CREDS, str(dest))

    searches = [c["body"] for c in server.calls_to("ListDatasets")]
    # 7 hits (frank is over maxSize) in pages of 3 -> 3, 3, 1: three requests, the short page ends it.
    assert len(searches) == 3
    for body in searches:
        assert body["search"] == "sales"
        assert body["sortBy"] == "DATASET_SORT_BY_VOTES"
        assert body["maxSize"] == 100 * MB
        assert body["pageSize"] == 3
        assert "license" not in body and "fileType" not in body  # allow-list spans families; xlsx wanted
    assert searches[0]["page"] == 1
    if tokens:
        assert [("page" in b, bool(b.get("pageToken"))) for b in searches[1:]] == [(False, True)] * 2
    else:
        assert [b.get("page") for b in searches] == [1, 2, 3]

    assert {f.rel_path for f in result.files} == EXPECTED_FILES
    assert set(result.completed) == EXPECTED_COMPLETED
    assert by_code(result.skipped, "license_not_allowed") == {("carol/sales-proprietary", None)}
    assert by_code(result.skipped, "no_tabular_files") == {("dave/sales-images", None)}
    assert by_code(result.skipped, "file_too_large") == {("heidi/sales-bigfile", "huge.csv")}
    assert {(f["ref"], f["stage"]) for f in result.failures} == {
        ("erin/sales-broken", "download"),
        ("grace/sales-evil", "extract"),
    }
    assert files_on_disk(dest) == EXPECTED_FILES  # nothing else: no temp files, no failed leftovers
    # Skipped datasets were never downloaded.
    downloaded_refs = {c["ref"] for c in server.calls_to("DownloadDataset")}
    assert downloaded_refs.isdisjoint({"carol/sales-proprietary", "dave/sales-images", "frank/sales-huge"})


def test_license_and_file_type_filters_narrow_search_and_are_rechecked(kaggle_env, server, dest):
    result = crawl_kaggle(config(queries=["sales", "weather"], licenses=["cc0"], file_types=["csv"]), CREDS, str(dest))
    bodies = [c["body"] for c in server.calls_to("ListDatasets")]
    assert {b["license"] for b in bodies} == {"DATASET_LICENSE_GROUP_CC"}
    assert {b["fileType"] for b in bodies} == {"DATASET_FILE_TYPE_GROUP_CSV"}
    # The CC family also holds CC BY / CC BY-SA / CC BY-NC-SA, which the allow-list ["cc0"] rejects.
    assert by_code(result.skipped, "license_not_allowed") == {
        ("bob/sales-forecast", None),
        ("erin/sales-broken", None),
        ("ivan/weather-daily", None),
    }
    assert {f.rel_path for f in result.files} == {
        "alice/retail-sales/3/sales.csv",
        "judy/weather-stations/7/stations.csv",
    }
    assert server.calls_to("DownloadDataset", "erin/sales-broken") == []


def test_max_datasets_per_query_stops_the_walk(kaggle_env, server, dest):
    result = crawl_kaggle(config(max_datasets_per_query=2), CREDS, str(dest))
    assert len(server.calls_to("ListDatasets")) == 1
    assert set(result.completed) == {"alice/retail-sales@3", "bob/sales-forecast@2"}
    assert result.skipped == []  # carol, third on page 1, was never looked at


# -- downloads and provenance ---------------------------------------------------------------------------


def test_files_match_server_bytes_and_carry_provenance(kaggle_env, server, dest):
    result = crawl_kaggle(config(), CREDS, str(dest))
    assert {f.rel_path for f in result.files} == EXPECTED_FILES
    for f in result.files:
        owner, slug, version, name = f.rel_path.split("/", 3)
        ds = server.dataset(f"{owner}/{slug}")
        original = ds.file(name).data
        assert Path(f.local_path) == dest / f.rel_path
        assert Path(f.local_path).read_bytes() == original  # also proves bob's zipped file was unwrapped
        p = f.provenance
        assert p["source"] == "kaggle"
        assert p["dataset_ref"] == ds.ref
        assert p["dataset_version"] == ds.version == int(version)
        assert p["license"] == ds.license_name
        assert p["url"] == f"https://www.kaggle.com/datasets/{ds.ref}"
        assert p["version_url"] == f"https://www.kaggle.com/datasets/{ds.ref}/versions/{ds.version}"
        assert p["title"] == ds.title
        assert p["file_name"] == name
        assert p["file_size"] == len(original) == p["size_bytes"]
        assert p["sha256"] == hashlib.sha256(original).hexdigest()
        assert p["last_updated"] == "2025-03-04T05:06:07Z"
        assert p["query"] == "sales"
    licenses = {f.provenance["dataset_ref"]: f.provenance["license_id"] for f in result.files}
    assert licenses == {"alice/retail-sales": "cc0", "bob/sales-forecast": "cc-by", "heidi/sales-bigfile": "odbl"}

    from openpyxl import load_workbook

    wb = load_workbook(dest / "alice/retail-sales/3/stores.xlsx", read_only=True)
    assert wb.sheetnames == ["stores", "managers"]
    # Downloads are pinned to the version that was listed.
    for call in server.calls_to("DownloadDataset") + server.calls_to("ListDatasetFiles"):
        assert call["body"]["datasetVersionNumber"] == server.dataset(call["ref"]).version
    assert json.loads(json.dumps(result.to_dict()))["completed"] == result.completed


def test_oversized_dataset_is_skipped_even_if_the_server_ignores_max_size(kaggle_env, server, dest):
    server.honor_max_size = False
    result = crawl_kaggle(config(max_dataset_bytes=20 * MB), CREDS, str(dest))
    # frank lists 10 GB, heidi 50 MB (its huge.csv): both over the 20 MB dataset cap.
    assert by_code(result.skipped, "too_large") == {("frank/sales-huge", None), ("heidi/sales-bigfile", None)}
    assert server.calls_to("ListDatasetFiles", "frank/sales-huge") == []


def test_size_caps_hold_when_the_listing_understates(kaggle_env, server, dest):
    # judy lists 100 bytes but serves 100 kB; bob's zipped file lists 100 bytes but unpacks to 200 kB.
    server.dataset("judy/weather-stations").files = [FakeFile("stations.csv", b"x" * 100_000, listed_size=100)]
    server.dataset("bob/sales-forecast").files = [
        FakeFile("data/train.csv", b"0" * 200_000, served="zip", listed_size=100)
    ]
    result = crawl_kaggle(
        config(queries=["weather", "sales"], max_file_bytes=64 * 1024, max_datasets_per_query=2), CREDS, str(dest)
    )
    assert by_code(result.skipped, "file_too_large") >= {
        ("judy/weather-stations", "stations.csv"),
        ("bob/sales-forecast", "data/train.csv"),
    }
    assert not any(p.startswith(("judy/", "bob/")) for p in files_on_disk(dest))
    assert seen_key("judy/weather-stations", 7) not in result.completed


# -- retries and failures -------------------------------------------------------------------------------


def test_rate_limit_and_network_errors_are_retried(kaggle_env, server, dest):
    server.fail("ListDatasets", 429, retry_after="1")
    server.fail("DownloadDataset", 503, ref="alice/retail-sales")
    server.fail("ListDatasetFiles", kind="drop", ref="bob/sales-forecast")
    server.fail("blob", kind="truncate", ref="alice/retail-sales", file="sales.csv")
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        time.sleep(seconds)

    result = crawl_kaggle(config(), CREDS, str(dest), sleep=sleep)

    assert {f.rel_path for f in result.files} == EXPECTED_FILES
    assert {f["ref"] for f in result.failures} == {"erin/sales-broken", "grace/sales-evil"}
    assert len(server.calls_to("ListDatasets")) == 4  # one 429, then the three pages
    assert 1.0 in sleeps  # Retry-After honoured as sent, not replaced by the (millisecond) backoff
    # Jittered exponential backoff otherwise: attempt n waits within [base*2^(n-1)/2, base*2^(n-1)].
    assert all(0.0005 <= s <= 0.004 for s in sleeps if s != 1.0)
    sales = server.dataset("alice/retail-sales").file("sales.csv").data
    assert (dest / "alice/retail-sales/3/sales.csv").read_bytes() == sales  # the truncated body was refetched


def test_a_dataset_that_keeps_failing_is_recorded_and_the_crawl_goes_on(kaggle_env, server, dest):
    result = crawl_kaggle(config(retries=3), CREDS, str(dest))
    (failure,) = [f for f in result.failures if f["ref"] == "erin/sales-broken"]
    assert failure["stage"] == "download"
    assert failure["attempts"] == 3
    assert failure["file"] == "data.csv"
    assert failure["version"] == 5
    assert "500" in failure["reason"]
    assert len(server.calls_to("DownloadDataset", "erin/sales-broken")) == 3
    assert not (dest / "erin").exists()
    assert set(result.completed) == EXPECTED_COMPLETED


def test_a_failing_search_is_recorded_and_the_next_query_runs(kaggle_env, server, dest):
    server.fail("ListDatasets", 500, times=3)
    result = crawl_kaggle(config(queries=["sales", "weather"]), CREDS, str(dest))
    assert [(f["ref"], f["stage"], f["attempts"]) for f in result.failures] == [("search:sales", "search", 3)]
    assert {f.rel_path for f in result.files} == {"judy/weather-stations/7/stations.csv"}


def test_a_stalled_response_times_out_and_is_retried(kaggle_env, server, dest):
    server.fail("ListDatasetFiles", kind="hang", seconds=1.5, ref="judy/weather-stations")
    started = time.monotonic()
    result = crawl_kaggle(config(queries=["weather"], request_timeout_s=0.3), CREDS, str(dest))
    assert time.monotonic() - started < 1.5
    assert result.completed == ["judy/weather-stations@7"]
    assert len(server.calls_to("ListDatasetFiles", "judy/weather-stations")) == 2


def test_missing_version_in_search_is_looked_up(kaggle_env, server, dest):
    server.list_versions = False
    result = crawl_kaggle(config(queries=["weather"]), CREDS, str(dest))
    assert [c["ref"] for c in server.calls_to("GetDataset")] == ["judy/weather-stations"]  # ivan: license
    assert result.completed == ["judy/weather-stations@7"]


def test_a_dataset_is_all_or_nothing(kaggle_env, server, dest):
    server.fail("DownloadDataset", 500, times=10, ref="alice/retail-sales", file="stores.xlsx")
    result = crawl_kaggle(config(queries=["sales"], max_datasets_per_query=1), CREDS, str(dest))
    assert result.failures[0]["ref"] == "alice/retail-sales" and result.failures[0]["file"] == "stores.xlsx"
    # sales.csv had been fetched first; it is removed so a rerun fetches the version whole.
    assert len(server.calls_to("DownloadDataset", "alice/retail-sales")) == 1 + 3
    assert files_on_disk(dest) == set()
    assert result.files == [] and result.completed == []


def test_zip_slip_member_is_refused(kaggle_env, server, dest, tmp_path):
    result = crawl_kaggle(config(), CREDS, str(dest))
    (failure,) = [f for f in result.failures if f["ref"] == "grace/sales-evil"]
    assert failure["stage"] == "extract" and "escapes" in failure["reason"]
    assert not list(tmp_path.rglob("evil.csv"))
    assert not (dest / "grace").exists()


# -- reruns ----------------------------------------------------------------------------------------------


def test_already_seen_versions_are_skipped_and_new_versions_fetched(kaggle_env, server, dest):
    first = crawl_kaggle(config(), CREDS, str(dest))
    server.calls.clear()
    second = crawl_kaggle(config(), CREDS, str(dest), already_seen=set(first.completed))
    assert second.files == []
    assert by_code(second.skipped, "already_seen") == {(k.split("@")[0], None) for k in EXPECTED_COMPLETED}
    assert {c["ref"] for c in server.calls_to("DownloadDataset")} == {"erin/sales-broken", "grace/sales-evil"}

    server.dataset("alice/retail-sales").version = 4
    third = crawl_kaggle(config(), CREDS, str(dest), already_seen=set(first.completed))
    assert {f.rel_path for f in third.files} == {"alice/retail-sales/4/sales.csv", "alice/retail-sales/4/stores.xlsx"}


def test_a_windowed_crawl_takes_only_its_interval_and_a_backfill_covers_each_week_once(kaggle_env, server, dest):
    server.catalog = weekly_catalog(10)
    start = datetime(2026, 1, 5, tzinfo=UTC)
    fetched: dict[int, set[str]] = {}
    for w in (1, 2, 3):  # a backfill of three weekly intervals
        lo, hi = start + timedelta(weeks=w), start + timedelta(weeks=w + 1)
        server.calls.clear()
        cfg = config(max_pages=1, updated_since=lo.isoformat(), updated_before=hi.isoformat())
        result = crawl_kaggle(cfg, CREDS, str(dest / str(w)))
        fetched[w] = set(result.completed)
        bodies = [c["body"] for c in server.calls_to("ListDatasets")]
        assert {b["sortBy"] for b in bodies} == {"DATASET_SORT_BY_UPDATED"}
        # newest first in pages of 3: weeks 9-7, 6-4, 3-1, 0. With max_pages=1 the two pages wholly newer
        # than the window are walked past free, and the page holding the window is the one counted.
        assert len(bodies) == 3
        assert result.skipped == [] and result.failures == []
    assert fetched == {w: {f"wk/sales-w{w:02d}@1"} for w in (1, 2, 3)}
    # the walk stops at the first page wholly older than the window, however many pages are allowed
    server.calls.clear()
    lo = start + timedelta(weeks=7)
    crawl_kaggle(config(max_pages=5, updated_since=lo.isoformat()), CREDS, str(dest / "7"))
    assert len(server.calls_to("ListDatasets")) == 2
    # a rerun of an interval (its versions now in the catalog) downloads nothing
    server.calls.clear()
    lo = start + timedelta(weeks=2)
    again = crawl_kaggle(
        config(updated_since=lo.isoformat(), updated_before=(lo + timedelta(weeks=1)).isoformat()),
        CREDS,
        str(dest / "again"),
        already_seen=fetched[2],
    )
    assert again.files == [] and server.calls_to("DownloadDataset") == []


def test_crawl_window_follows_the_run_type():
    from datamind.ingest.kaggle_config import crawl_window

    lo, hi = datetime(2026, 2, 2, tzinfo=UTC), datetime(2026, 2, 9, tzinfo=UTC)
    window = {"updated_since": "2026-02-02T00:00:00+00:00", "updated_before": "2026-02-09T00:00:00+00:00"}
    assert crawl_window("auto", "scheduled", lo, hi) == window
    assert crawl_window("auto", "backfill", lo, hi) == window
    assert crawl_window("auto", "manual", lo, hi) == {"updated_since": None, "updated_before": None}
    assert crawl_window("interval", "manual", lo, hi) == window
    assert crawl_window("none", "backfill", lo, hi) == {"updated_since": None, "updated_before": None}
    with pytest.raises(ValueError, match="no data interval"):
        crawl_window("interval", "manual", None, None)
    with pytest.raises(ValueError, match="empty"):
        KaggleCrawlConfig(updated_since="2026-02-09", updated_before="2026-02-02")
    with pytest.raises(ValueError, match="ISO 8601"):
        KaggleCrawlConfig(updated_since="last tuesday")
    # a naive bound is UTC, an offset is converted, and a window always searches newest-updated first
    cfg = KaggleCrawlConfig(updated_since="2026-02-02T01:00:00+01:00", sort_by="votes")
    assert cfg.updated_since == "2026-02-02T00:00:00+00:00" and cfg.sort_by == "updated"
    assert cfg.in_window(datetime(2026, 2, 1, 23, 59)) == "older"
    assert cfg.in_window(datetime(2026, 2, 2)) == "in"


def test_rerun_rewrites_the_same_paths(kaggle_env, server, dest):
    first = crawl_kaggle(config(), CREDS, str(dest))
    before = {p: (dest / p).read_bytes() for p in files_on_disk(dest)}
    second = crawl_kaggle(config(), CREDS, str(dest))
    assert [f.rel_path for f in second.files] == [f.rel_path for f in first.files]
    assert {p: (dest / p).read_bytes() for p in files_on_disk(dest)} == before


# -- credentials and secrets -----------------------------------------------------------------------------


def _assert_no_secret_in_tree(root: Path, secrets: list[str]) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in secrets:
                assert secret.encode() not in data, f"secret written to {path}"


def test_secrets_stay_out_of_logs_output_and_files(kaggle_env, server, dest, tmp_path, caplog, capsys):
    caplog.set_level("DEBUG")
    server.fail("ListDatasets", 429, retry_after="0")
    result = crawl_kaggle(config(), CREDS, str(dest))
    token_result = crawl_kaggle(
        config(queries=["weather"]), KaggleCredentials(api_token=TOKEN), str(tmp_path / "dest2")
    )
    out, err = capsys.readouterr()

    assert result.failures and token_result.files  # warnings were logged; the token authenticated
    assert {c["auth"] for c in server.calls if c["method"] != "blob"} == {"basic", "bearer"}
    text = caplog.text + out + err + json.dumps(result.to_dict()) + json.dumps(token_result.to_dict())
    text += repr(CREDS) + str(KaggleCredentials(api_token=TOKEN))
    assert KEY not in text and TOKEN not in text
    _assert_no_secret_in_tree(tmp_path, [KEY, TOKEN])
    assert not list(tmp_path.rglob("kaggle.json")) and not list(tmp_path.rglob("access_token"))
    with pytest.raises(TypeError):
        pickle.dumps(CREDS)


def test_fresh_process_import_is_silent_and_leaves_no_secret(server, tmp_path):
    """A new interpreter (so ``import kaggle`` really runs, and prints its auth help with no env credentials)."""
    server.reset()
    home = tmp_path / "home"
    home.mkdir()
    script = textwrap.dedent(f"""
        import json, os, sys
        from kagglesdk import kaggle_env
        kaggle_env._env_to_endpoint[kaggle_env.KaggleEnv.LOCAL] = {server.url!r}
        from datamind.ingest.kaggle import crawl_kaggle, KaggleCrawlConfig, KaggleCredentials
        creds = KaggleCredentials.from_connection(login={USER!r}, password=os.environ["TEST_CONN_PASSWORD"])
        cfg = KaggleCrawlConfig(queries=["weather"], retries=2, backoff_base_s=0.001)
        result = crawl_kaggle(cfg, creds, sys.argv[1])
        print("RESULT " + json.dumps(sorted(f.rel_path for f in result.files)))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAGGLE_")}
    env.update(HOME=str(home), KAGGLE_API_ENVIRONMENT="LOCALHOST", TEST_CONN_PASSWORD=KEY, PYTHONPATH=str(REPO))
    env.pop("XDG_CONFIG_HOME", None)
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "dest")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("RESULT "), proc.stdout  # kaggle's import chatter swallowed
    assert json.loads(lines[0][7:]) == ["judy/weather-stations/7/stations.csv"]
    assert KEY not in proc.stdout + proc.stderr
    _assert_no_secret_in_tree(tmp_path, [KEY])
    assert not list(home.rglob("kaggle.json"))


def test_rejected_or_missing_credentials_fail_the_crawl_clearly(kaggle_env, server, dest):
    wrong = KaggleCredentials(username=USER, key="wrong-" + KEY)
    with pytest.raises(KaggleAuthError, match="HTTP 401") as info:
        crawl_kaggle(config(), wrong, str(dest))
    assert KEY not in str(info.value)
    with pytest.raises(KaggleAuthError, match="no Kaggle credentials"):
        crawl_kaggle(config(), None, str(dest))  # the environment holds none either


def test_credentials_from_environment_and_connection(tmp_path):
    home = tmp_path / "h"
    (home / ".kaggle").mkdir(parents=True)
    assert not KaggleCredentials.from_env({}, home=str(home)).present
    (home / ".kaggle" / "kaggle.json").write_text(json.dumps({"username": "u1", "key": "k1"}))
    c = KaggleCredentials.from_env({}, home=str(home))
    assert (c.username, c.key, c.source) == ("u1", "k1", "file:kaggle.json")
    c = KaggleCredentials.from_env({"KAGGLE_USERNAME": "u2", "KAGGLE_KEY": "k2"}, home=str(home))
    assert (c.username, c.key) == ("u2", "k2")
    token_file = tmp_path / "tok"
    token_file.write_text("tok-from-file\n")
    c = KaggleCredentials.from_env(
        {"KAGGLE_API_TOKEN": str(token_file), "KAGGLE_USERNAME": "u2", "KAGGLE_KEY": "k2"}, home=str(home)
    )
    assert c.api_token == "tok-from-file"  # a token wins, as in the kaggle client
    assert KaggleCredentials.from_connection("bob", "pw").key == "pw"
    assert KaggleCredentials.from_connection(None, None, '{"api_token": "t9"}').api_token == "t9"
    assert KaggleCredentials.from_connection("", "t8").api_token == "t8"
    with pytest.raises(ValueError):
        KaggleCredentials(username="only-user")
    assert "k2" not in repr(KaggleCredentials("u2", "k2")) and "u2" in repr(KaggleCredentials("u2", "k2"))


# -- pure helpers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, expected",
    [
        ("CC0: Public Domain", "cc0"),
        ("Attribution 4.0 International (CC BY 4.0)", "cc-by"),
        ("CC BY-SA 4.0", "cc-by-sa"),
        ("CC BY-NC-SA 4.0", "cc-by-nc-sa"),
        ("Attribution-NonCommercial 4.0 International (CC BY-NC 4.0)", "cc-by-nc"),
        ("Open Database License (ODbL)", "odbl"),
        ("ODC Public Domain Dedication and Licensing (PDDL)", "pddl"),
        ("Open Data Commons Attribution License (ODC-By)", "odc-by"),
        ("Database: Open Database, Contents: Database Contents", "odbl"),
        ("GPL 2", "gpl"),
        ("MIT", "mit"),
        ("Apache 2.0", "apache-2.0"),
        ("World Bank Dataset Terms of Use", "world-bank"),
        ("Other (specified in description)", "other"),
        ("Unknown", "unknown"),
        ("", "unknown"),
        (None, "unknown"),
    ],
)
def test_license_names_map_to_canonical_ids(name, expected):
    assert license_id(name) == expected


def test_config_from_form_validates():
    cfg = KaggleCrawlConfig.from_form({"queries": "retail", "file_types": [".CSV"], "licenses": ["cc0"]})
    assert cfg.queries == ("retail",) and cfg.file_types == ("csv",)
    assert cfg.allows_license("CC0: Public Domain") and not cfg.allows_license("CC BY 4.0")
    assert KaggleCrawlConfig.from_form({"licenses": ["Some Custom License"]}).allows_license("some custom license")
    assert KaggleCrawlConfig.from_form(cfg.to_dict()) == cfg
    for bad in (
        {"quereis": ["x"]},
        {"file_types": ["json"]},
        {"sort_by": "best"},
        {"max_pages": 0},
        {"queries": []},
        {"retries": "many"},
    ):
        with pytest.raises(ValueError):
            KaggleCrawlConfig.from_form(bad)


class _Resp:
    def __init__(self, value):
        self.headers = {} if value is None else {"Retry-After": value}


@pytest.mark.parametrize(
    "value, low, high",
    [
        ("7", 7, 7),
        ("0.5", 0.5, 0.5),
        ("-3", 0, 0),
        (None, None, None),
        ("soon", None, None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0, 0),  # a date in the past: retry now
    ],
)
def test_retry_after_parsing(value, low, high):
    got = retry_after_seconds(_Resp(value))
    assert got == low if low is None else low <= got <= high


def test_backoff_is_jittered_exponential_and_capped():
    lo = RetryPolicy(base_s=1, max_s=5, rand=lambda: 0.0)
    hi = RetryPolicy(base_s=1, max_s=5, rand=lambda: 0.999999)
    assert [lo.backoff(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 2.5]
    assert [round(hi.backoff(n), 3) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("a.csv", "a.csv"),
        ("dir/a.csv", "dir/a.csv"),
        ("./dir//a.csv", "dir/a.csv"),
        ("dir\\a.csv", "dir/a.csv"),
        ("../a.csv", None),
        ("dir/../../a.csv", None),
        ("/etc/passwd", None),
        ("C:/x.csv", None),
        ("", None),
    ],
)
def test_safe_member_path(name, expected):
    assert safe_member_path(name) == expected
