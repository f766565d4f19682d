"""What changed since the previous release, as publishing records it and the approval task, the report and the
viewer show it: samples added and dropped per source, per file (by name) and per category and hop, the samples a
backfill added on files the previous release already covered, and the audit figures that moved."""

from __future__ import annotations

from datetime import UTC, datetime

from test_publish import judged_row, write_judged

from datamind.assets import DIRS
from datamind.publish import changes, promotion
from datamind.publish.stage import publish_dataset
from datamind.schemas import CATALOG_FILES
from datamind.shards import write_shard
from datamind.storage import DataRoot

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _catalog(root: DataRoot, files: dict[str, tuple[str, str]]) -> None:
    """Catalog rows for ``files``: file_id -> (source, relative path)."""
    rows = [
        {"file_id": fid, "source": source, "source_uri": f"/in/{rel}", "rel_path": rel, "format": "csv",
         "status": "accepted", "content_sha256": fid * 8, "size_bytes": 10, "ingested_at": NOW, "run_id": "r"}
        for fid, (source, rel) in files.items()
    ]  # fmt: skip
    write_shard(root, CATALOG_FILES, DIRS["catalog_files"], rows, f"part-{len(rows)}.parquet")


def _on(root: DataRoot, row: dict, file_id: str, name: str) -> dict:
    uri = f"raw/{file_id}/{name}"
    if not root.exists(uri):
        root.write_text(uri, "a,b\n1,2\n")
    return {**row, "file_id": file_id, "data_uri": uri}


def test_a_backfill_shows_what_it_added_on_new_files_apart_from_files_already_covered(root):
    _catalog(root, {"f1": ("samples", "sales.csv"), "f2": ("samples", "cars.csv"),
                    "f3": ("backfill", "q2/auto-mpg.csv")})  # fmt: skip
    first = [_on(root, judged_row(i), "f1", "sales.csv") for i in range(6)]
    first += [_on(root, judged_row(i), "f2", "cars.csv") for i in range(6, 10)]
    write_judged(root, first, "part-a.parquet")
    v1 = publish_dataset(root, "run-1")
    assert v1["changes"]["previous"] is None and v1["changes"]["samples"]["added"] == 10
    assert v1["changes"]["headline"] == "First release: 10 samples from 2 files."

    # the backfill: 3 samples on the new file, and 2 more on a file v1 already covered
    more = [_on(root, judged_row(i), "f3", "auto-mpg.csv") for i in range(20, 23)]
    more += [_on(root, judged_row(i), "f1", "sales.csv") for i in range(30, 32)]
    write_judged(root, more, "part-b.parquet")
    v2 = publish_dataset(root, "run-2")
    c = v2["changes"]
    assert c["previous"] == "v1" and c["previous_promotion"] == v1["promotion"]["status"]
    assert c["samples"] == {"before": 10, "after": 15, "added": 5, "dropped": 0, "unchanged": 10}
    assert (c["added_on_new_files"], c["added_on_covered_files"]) == (3, 2)
    assert c["files"] == {"before": 2, "after": 3, "new": 1, "gone": 0}
    by_file = {r["name"]: r for r in c["by_file"]}
    assert set(by_file) == {"auto-mpg.csv", "sales.csv"}  # cars.csv did not change: it is named apart
    assert (c["unchanged_files"], c["n_unchanged_files"]) == ([{"label": "cars.csv", "samples": 4}], 1)
    assert by_file["auto-mpg.csv"] | {"file_id": "f3"} == {
        "file_id": "f3", "name": "auto-mpg.csv", "label": "auto-mpg.csv", "source": "backfill", "before": 0,
        "after": 3, "added": 3, "dropped": 0, "new_file": True, "gone_file": False,
    }  # fmt: skip
    assert (by_file["sales.csv"]["before"], by_file["sales.csv"]["after"], by_file["sales.csv"]["new_file"]) == (
        6, 8, False,
    )  # fmt: skip
    assert {r["source"]: (r["added"], r["dropped"]) for r in c["by_source"]} == {"backfill": (3, 0), "samples": (2, 0)}
    cells = {(r["category"], r["hop"]): (r["before"], r["after"]) for r in c["by_category_hop"]}
    assert cells == {("aggregation", 1): (5, 7), ("counting", 1): (5, 8)}
    assert c["headline"] == (
        "Since v1: 5 samples added, 0 dropped (10 -> 15). Of the added: 3 on 1 file(s) new to this release, 2 on "
        "files v1 already covered."
    )

    # the next release drops a file's samples: they show as dropped, the file as no longer in it
    root.remove(f"{DIRS['judged']}/part-a.parquet")
    write_judged(root, first[:6], "part-a.parquet")
    v3 = publish_dataset(root, "run-3")
    c3 = v3["changes"]
    assert c3["previous"] == "v2" and c3["samples"]["dropped"] == 4 and c3["files"]["gone"] == 1
    (gone,) = [r for r in c3["by_file"] if r["gone_file"]]
    assert (gone["name"], gone["before"], gone["after"], gone["dropped"]) == ("cars.csv", 4, 0, 4)


def test_the_audit_figures_that_moved_name_their_verdict_before_and_after():
    before = changes.Side(
        "v1", {"s1": ("f1", "aggregation", 1)}, audit={"n_samples": 1, "repeated_word_question_share": 0.0}
    )
    after = changes.Side(
        "v2", {"s1": ("f1", "aggregation", 1), "s2": ("f1", "aggregation", 2)},
        audit={"n_samples": 2, "repeated_word_question_share": 0.5},
    )  # fmt: skip
    (moved,) = changes.compare(before, after)["audit"]
    assert moved == {"name": "repeated_word_question_share", "before": 0.0, "after": 0.5, "op": "<=", "bound": 0.0,
                     "ok_before": True, "ok_after": False}  # fmt: skip
    text = "\n".join(changes.as_markdown(changes.compare(before, after)))
    assert "repeated_word_question_share 0.0 -> 0.5 (now misses)" in text


def test_the_approval_text_says_what_changed_and_no_longer_claims_it_waits_forever():
    c = changes.compare(
        changes.Side("v1", {"s1": ("f1", "counting", 1)}, {"f1": {"name": "a.csv", "source": "s"}}),
        changes.Side(
            "v2", {"s1": ("f1", "counting", 1), "s2": ("f9", "counting", 1)},
            {"f1": {"name": "a.csv", "source": "s"}, "f9": {"name": "x|*evil*.csv", "source": "new_src"}},
        ),
    )  # fmt: skip
    manifest = {"version_id": "v2", "n_samples": 2, "changes": c,
                "promotion": {"status": "awaiting_approval", "reason": "this deployment asks"}}  # fmt: skip
    body = promotion.review_body(manifest, "/r", "/v")
    assert "not trained on until someone approves it" not in body
    assert "**What changed.** Since v1: 1 samples added, 0 dropped (1 -> 2)." in body
    assert "1 on 1 file(s) new to this release, 0 on files v1 already covered" in body
    # a file's name cannot break the table or add markup
    assert "| x\\|\\*evil\\*.csv (new) | new\\_src | 0 | 1 | 1 | 0 |" in body
    assert "shown on the release's report and its page in the viewer" in body


def test_a_release_published_before_changes_were_recorded_is_compared_when_asked(tmp_path):
    from review.release_builder import write_release

    root = DataRoot(str(tmp_path / "data"))
    write_release(root, 1, 30)
    m2 = write_release(root, 2, 40)
    assert "changes" not in m2
    c = changes.changes_of(root, m2)
    assert c["previous"] == "v1" and c["samples"] == {"before": 30, "after": 40, "added": 10, "dropped": 0,
                                                      "unchanged": 30}  # fmt: skip
    assert {r["name"] for r in c["by_file"]} == {f"orders_{i}.csv" for i in range(30, 40)}


def test_two_changed_files_of_one_name_are_told_apart_by_their_ids():
    c = changes.compare(
        changes.Side("v1", {}, {}),
        changes.Side(
            "v2", {"s1": ("aaaa1111bbbb", "counting", 1), "s2": ("cccc2222dddd", "counting", 1)},
            {"aaaa1111bbbb": {"name": "orders.csv", "source": "a"},
             "cccc2222dddd": {"name": "orders.csv", "source": "b"}},
        ),
    )  # fmt: skip
    assert sorted(r["label"] for r in c["by_file"]) == ["orders.csv (aaaa1111)", "orders.csv (cccc2222)"]


def test_files_a_release_left_alone_are_named_on_one_line_escaped_and_bounded():
    """Issue 47: the what-changed view listed only files that changed; that the covered files kept their counts
    was nowhere. They are named on one line, a release over thousands of files naming the first few."""
    from datamind.templating import render_macro

    kept = {f"s{i}": ("f1", "counting", 1) for i in range(3)} | {"s9": ("f2", "counting", 1)}
    files = {"f1": {"name": "orders.csv", "source": "a"}, "f2": {"name": "<b>x|*y*.csv", "source": "a"},
             "f3": {"name": "new.csv", "source": "b"}}  # fmt: skip
    c = changes.compare(changes.Side("v1", kept, files), changes.Side("v2", kept | {"s5": ("f3", "ranking", 1)}, files))
    assert [r["name"] for r in c["by_file"]] == ["new.csv"]
    html = render_macro("quality/changes.html.j2", "changes_section", c, None, "v2")
    line = " ".join(html.split("<p class='meta unchanged'>")[1].split("</p>")[0].split())
    assert line == "2 files unchanged: &lt;b&gt;x|*y*.csv 1 → 1; orders.csv 3 → 3."
    md = "\n".join(changes.as_markdown(c))
    assert "2 files unchanged: \\<b\\>x\\|\\*y\\*.csv 1 -> 1; orders.csv 3 -> 3." in md

    many = {f"s{i}": (f"f{i:04d}", "counting", 1) for i in range(2500)}
    big = changes.compare(changes.Side("v1", many), changes.Side("v2", many | {"t": ("g", "counting", 1)}))
    assert big["n_unchanged_files"] == 2500 and len(big["unchanged_files"]) == changes.MAX_UNCHANGED_FILES
    line = render_macro("quality/changes.html.j2", "changes_section", big, None, "v2").split("unchanged'>")[1]
    assert f"; ... and {2500 - changes.MAX_UNCHANGED_FILES:,} more." in line.split("</p>")[0]
    assert "f0000 1 → 1" in line and "f2499" not in line
