"""Host-side workspace upkeep never follows a link a cell planted (issue: restore_inputs copied the input
over any host file through a planted symlink; cleanup chmodded a host file through one)."""

from __future__ import annotations

import os
import stat

from datamind.sandbox.workspace import Workspace


def _victim(tmp_path):
    victim = tmp_path / "victim.cfg"
    victim.write_text("secret host config\n")
    os.chmod(victim, 0o600)
    return victim


def test_restoring_an_input_replaces_a_planted_symlink_instead_of_writing_through_it(tmp_path):
    data = tmp_path / "sales.csv"
    data.write_text("a,b\n1,2\n")
    victim = _victim(tmp_path)
    (tmp_path / "work").mkdir(exist_ok=True)
    ws = Workspace.create(tmp_path / "work", [str(data)], gid=None)
    try:
        dst = ws.path / "sales.csv"
        os.chmod(ws.path, 0o700)
        os.unlink(dst)
        os.symlink(victim, dst)  # what a cell can do in its own workspace
        for name in (".sales.csv.copying", ".sales.csv.tmp"):
            os.symlink(victim, ws.path / name)
        assert ws.restore_inputs() == ["sales.csv"]
        assert victim.read_text() == "secret host config\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
        assert not dst.is_symlink() and dst.read_text() == "a,b\n1,2\n"
    finally:
        ws.cleanup()


def test_an_input_rewritten_in_place_with_its_mtime_restored_is_still_restored(tmp_path):
    data = tmp_path / "sales.csv"
    data.write_text("a,b\n1,2\n")
    (tmp_path / "work").mkdir(exist_ok=True)
    ws = Workspace.create(tmp_path / "work", [str(data)], gid=None)
    try:
        dst = ws.path / "sales.csv"
        st = dst.stat()
        os.chmod(dst, 0o644)
        dst.write_text("a,b\n9,9\n")  # same size
        os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.chmod(dst, 0o444)
        assert ws.restore_inputs() == ["sales.csv"] and dst.read_text() == "a,b\n1,2\n"
    finally:
        ws.cleanup()


def test_cleanup_does_not_chmod_through_a_planted_symlink(tmp_path):
    data = tmp_path / "sales.csv"
    data.write_text("a,b\n1,2\n")
    victim = _victim(tmp_path)
    victim_dir = tmp_path / "host_dir"
    victim_dir.mkdir(mode=0o500)
    (tmp_path / "work").mkdir(exist_ok=True)
    ws = Workspace.create(tmp_path / "work", [str(data)], gid=None)
    d = ws.path / "d"
    d.mkdir()
    os.symlink(victim, d / "l")
    os.symlink(victim_dir, d / "ld")
    os.chmod(d, 0o500)
    ws.cleanup()
    assert not ws.path.exists()
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600 and victim.read_text() == "secret host config\n"
    assert stat.S_IMODE(victim_dir.stat().st_mode) == 0o500
