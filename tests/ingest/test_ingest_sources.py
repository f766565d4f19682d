"""Listing sources: directories, globs, zip archives (bomb-safe) and fsspec URLs."""

from __future__ import annotations

import hashlib
import struct
import zipfile

import fsspec
import pytest
from ingest_builders import write_csv, zip_with

from datamind.ingest.sources import SourceFile, SourceReadError, list_source_files
from datamind.settings import Limits


def test_directory_listing_is_recursive_sorted_and_skips_hidden(tmp_path, limits):
    write_csv(tmp_path / "b.csv")
    (tmp_path / "sub").mkdir()
    write_csv(tmp_path / "sub" / "a.csv")
    (tmp_path / ".hidden.csv").write_text("x")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "c.csv").write_text("x")
    files = list_source_files(str(tmp_path), limits)
    assert [f.rel_path for f in files] == ["b.csv", "sub/a.csv"]
    assert files[0].read_bytes() == (tmp_path / "b.csv").read_bytes()
    assert files[0].sha256() == hashlib.sha256((tmp_path / "b.csv").read_bytes()).hexdigest()


def test_glob_keeps_paths_relative_to_its_base(tmp_path, limits):
    (tmp_path / "x").mkdir()
    write_csv(tmp_path / "x" / "a.csv")
    (tmp_path / "x" / "notes.txt").write_text("hi")
    files = list_source_files(str(tmp_path / "x" / "*.csv"), limits)
    assert [f.rel_path for f in files] == ["a.csv"]


def test_missing_or_empty_source_is_an_error(tmp_path, limits):
    with pytest.raises(FileNotFoundError):
        list_source_files(str(tmp_path / "nope"), limits)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError):
        list_source_files(str(tmp_path / "empty"), limits)


def test_zip_members_are_listed_and_read(tmp_path, limits):
    data = b"id,v\n" + b"".join(b"%d,%d\n" % (i, i) for i in range(30))
    members = {"tables/one.csv": data, "two.csv": data + b"30,30\n", "__MACOSX/._one.csv": b"x"}
    z = zip_with(tmp_path / "bundle.zip", members)
    files = list_source_files(str(z), limits)
    assert [f.rel_path for f in files] == ["tables/one.csv", "two.csv"]
    assert files[0].source_uri == f"zip://tables/one.csv::{z}"
    assert files[0].read_bytes() == data
    with fsspec.open(files[0].source_uri, "rb") as fh:  # the URI is a valid fsspec chain too
        assert fh.read() == data


def test_zip_bomb_by_declared_size_is_never_decompressed(tmp_path):
    z = zip_with(tmp_path / "bomb.zip", {"zeros.csv": b"0" * 2_000_000})
    (f,) = list_source_files(str(z), Limits(max_uncompressed_bytes=100_000))
    assert f.precheck == "archive_bomb"
    with pytest.raises(SourceReadError) as err:
        f.read_bytes()
    assert err.value.code == "archive_bomb"


def _patch_declared_size(path, new_size: int) -> None:
    """Rewrite a single-member zip so its headers understate the uncompressed size (a lying bomb)."""
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.infolist()[0]
    struct.pack_into("<I", raw, info.header_offset + 22, new_size)  # local header: uncompressed size
    cd = raw.find(b"PK\x01\x02")
    struct.pack_into("<I", raw, cd + 24, new_size)  # central directory: uncompressed size
    path.write_bytes(bytes(raw))


def test_zip_member_that_lies_about_its_size_is_stopped(tmp_path):
    z = zip_with(tmp_path / "liar.zip", {"big.csv": b"1,2\n" * 500_000})
    _patch_declared_size(z, 1_000)
    (f,) = list_source_files(str(z), Limits(max_uncompressed_bytes=100_000))
    assert f.precheck is None and f.size == 1_000
    with pytest.raises(SourceReadError) as err:
        f.read_bytes()
    assert err.value.code in ("archive_bomb", "unloadable")


def test_oversized_plain_file_is_listed_with_a_precheck(tmp_path):
    write_csv(tmp_path / "a.csv", 100)
    (f,) = list_source_files(str(tmp_path), Limits(max_file_bytes=100))
    assert f.precheck == "file_too_large"
    assert f.sha256() != hashlib.sha256((tmp_path / "a.csv").read_bytes()).hexdigest()  # never read


def test_fsspec_url_source():
    fs = fsspec.filesystem("memory")
    fs.pipe("/dm-src/in/a.csv", b"id\n1\n")
    fs.pipe("/dm-src/in/deep/b.csv", b"id\n2\n")
    try:
        files = list_source_files("memory://dm-src/in", Limits())
        assert [f.rel_path for f in files] == ["a.csv", "deep/b.csv"]
        assert files[1].read_bytes() == b"id\n2\n"
        assert files[1].source_uri.startswith("memory://")
    finally:
        fs.rm("/dm-src", recursive=True)


def test_spec_round_trip():
    f = SourceFile("a/b.csv", "/x/a/b.csv", 10, 100, None, {"dataset": "d"})
    assert SourceFile.from_spec(f.to_spec()) == f


def test_symlinks_out_of_the_source_and_escaping_zip_members_are_recorded_not_followed(tmp_path):
    import zipfile as zf

    from datamind.ingest.sources import list_source_files

    outside = tmp_path / "secret.csv"
    outside.write_text("k,v\nkey,sk-host-secret\n")
    src = tmp_path / "src"
    src.mkdir()
    (src / "good.csv").write_text("a,b\n1,2\n")
    (src / "leak.csv").symlink_to(outside)
    (src / "inner.csv").symlink_to(src / "good.csv")  # a link that stays inside is an ordinary file
    (src / "linked_dir").symlink_to(tmp_path)
    with zf.ZipFile(src / "bundle.zip", "w") as z:
        z.writestr("ok.csv", "a,b\n1,2\n")
        z.writestr("/etc/abs.csv", "a\n1\n")
        z.writestr("../up.csv", "a\n1\n")
    files = {f.rel_path: f for f in list_source_files(str(src))}
    assert files["leak.csv"].precheck == "unsafe_path" and files["linked_dir"].precheck == "unsafe_path"
    assert files["good.csv"].precheck is None and files["inner.csv"].precheck is None
    zipped = {f.rel_path: f for f in list_source_files(str(src / "bundle.zip"))}
    assert zipped["ok.csv"].precheck is None
    assert zipped["etc/abs.csv"].precheck == "unsafe_path" and zipped["../up.csv"].precheck == "unsafe_path"
    for f in (files["leak.csv"], zipped["../up.csv"]):
        with pytest.raises(SourceReadError) as refused:
            f.read_bytes()  # never read
        assert refused.value.code == "unsafe_path"


def test_several_sources_list_together_and_keep_equal_names_apart(tmp_path):
    from ingest_builders import write_csv

    from datamind.ingest.sources import list_sources
    from datamind.ingest.stage import plan_ingest
    from datamind.storage import DataRoot

    for quarter in ("2024-q1", "2024-q2"):
        (tmp_path / quarter).mkdir()
        write_csv(tmp_path / quarter / "sales.csv", 30 + len(quarter))
    (tmp_path / "2024-q2" / "extra.csv").write_text("a,b\n1,2\n")
    files = list_sources([str(tmp_path / "2024-q1"), str(tmp_path / "2024-q2") + "/"])
    assert [f.rel_path for f in files] == ["2024-q1/sales.csv", "2024-q2/extra.csv", "2024-q2/sales.csv"]
    assert {f.provenance["source_uri"] for f in files} == {str(tmp_path / "2024-q1"), str(tmp_path / "2024-q2") + "/"}
    specs = plan_ingest(DataRoot(str(tmp_path / "root")), files, "backfill", 2)
    ids = [e["file_id"] for s in specs for e in s["files"]]
    assert len(specs) == 2 and len(set(ids)) == 3  # one run, mapped shards, every file once
    # a single source keeps its paths unchanged
    assert [f.rel_path for f in list_sources([str(tmp_path / "2024-q1")])] == ["sales.csv"]


def test_a_source_that_is_one_file_is_listed_under_its_own_name(tmp_path):
    from datamind.ingest.sources import list_sources

    for folder in ("exports", "archive", "2024-q2"):
        (tmp_path / folder).mkdir()
    write_csv(tmp_path / "exports" / "sales_orders.csv", 30)
    write_csv(tmp_path / "archive" / "sales_orders.csv", 40)  # the same name from another folder
    write_csv(tmp_path / "2024-q2" / "extra.csv", 31)
    single, other, folder = (
        str(tmp_path / "exports" / "sales_orders.csv"),
        str(tmp_path / "archive" / "sales_orders.csv"),
        str(tmp_path / "2024-q2"),
    )
    assert [f.rel_path for f in list_sources([single])] == ["sales_orders.csv"]
    files = list_sources([single, folder, other, single])
    assert [f.rel_path for f in files] == ["sales_orders.csv", "2024-q2/extra.csv", "archive/sales_orders.csv"]
    assert [f.source_uri for f in files] == [single, str(tmp_path / "2024-q2" / "extra.csv"), other]
