"""A Python runtime that lives inside a scratch directory (a virtualenv under /tmp, as a checkout in /tmp has)
stays importable in every cell, although each cell gets a fresh, empty /tmp. The cells once lost it: every
module not imported before the cell started failed with ModuleNotFoundError."""

from __future__ import annotations

import os

import pytest

from datamind.sandbox import isolation

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root here")


def _in_child(check) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if check() else 3)
        except BaseException as exc:  # noqa: BLE001
            os.write(2, f"child failed: {type(exc).__name__}: {exc}\n".encode())
            os._exit(4)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_read_only_runtime_under_tmp_survives_each_cells_fresh_scratch(tmp_path):
    assert str(tmp_path).startswith("/tmp/")  # the case at hand: everything below lives in a scratch dir
    runtime = tmp_path / "venv" / "lib"
    runtime.mkdir(parents=True)
    (runtime / "late_module.py").write_text("VALUE = 42\n")
    (tmp_path / "left_by_someone.txt").write_text("not for the cell")
    workdir = tmp_path / "sessions" / "w1"
    workdir.mkdir(parents=True)
    (workdir / "input.csv").write_text("a\n1\n")

    def cell_view() -> bool:
        isolation.unshare(isolation.CLONE_NEWNS)
        isolation.mount(None, "/", None, isolation.MS_REC | isolation.MS_PRIVATE)
        isolation._bind(str(runtime), str(runtime), writable=False)  # as build_root binds the runtime
        isolation._READONLY_UNDER_SCRATCH[:] = [str(runtime)]
        isolation.private_cell_view(str(workdir), tmp_mb=8, disk_mb=8, owner_gid=None)
        readable = (runtime / "late_module.py").read_text() == "VALUE = 42\n"
        try:
            (runtime / "planted.py").write_text("x")
            read_only = False
        except OSError:
            read_only = True
        scratch_is_fresh = not (tmp_path / "left_by_someone.txt").exists()
        inputs_kept = (workdir / "input.csv").read_text() == "a\n1\n"
        return readable and read_only and scratch_is_fresh and inputs_kept

    assert _in_child(cell_view) == 0
    assert not (runtime / "planted.py").exists()
