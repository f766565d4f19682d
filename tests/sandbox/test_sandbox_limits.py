"""Settings and policy plumbing that needs no zygote."""

from __future__ import annotations

import os

import pytest

from datamind.sandbox.limits import SandboxLimits, missing_layers
from datamind.sandbox.session import _default_hidden_paths
from datamind.settings import REPO_ROOT


def test_limits_read_deployment_overrides_from_the_environment(monkeypatch):
    monkeypatch.setenv("DATAMIND_SANDBOX_MEMORY_MB", "3000")
    monkeypatch.setenv("DATAMIND_SANDBOX_WALL_S", "12.5")
    monkeypatch.setenv("DATAMIND_SANDBOX_GUARD", "false")
    monkeypatch.setenv("DATAMIND_SANDBOX_HIDE_PATHS", os.pathsep.join(["/srv/a", "/srv/b"]))
    limits = SandboxLimits.from_env()
    assert (limits.memory_mb, limits.wall_s, limits.guard) == (3000, 12.5, False)
    assert limits.hide_paths == ("/srv/a", "/srv/b")
    monkeypatch.setenv("DATAMIND_SANDBOX_CPU_S", "lots")
    with pytest.raises(ValueError, match="DATAMIND_SANDBOX_CPU_S"):
        SandboxLimits.from_env()


def test_secret_locations_are_hidden_by_default(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.setenv("DATAMIND_DATA_ROOT", str(tmp_path / "data"))
    hidden = _default_hidden_paths(SandboxLimits(hide_paths=("/srv/extra",)))
    for expected in (tmp_path / "airflow", tmp_path / "data", REPO_ROOT, os.path.expanduser("~"), "/srv/extra"):
        assert os.path.realpath(expected) in hidden
    assert "/" not in hidden


def test_strict_policy_names_what_is_missing():
    private = {"allowlisted_root", "private_cell_mounts", "ipc_namespace", "cell_network_namespace"}
    bounded = {"memory_cgroup", "seccomp_filter"}
    root = {"network_namespace", "mount_namespace", "dedicated_uid", *private, *bounded}
    assert missing_layers({*root, "pids_cgroup"}) == []
    assert missing_layers({*root, "rlimit_nproc"}) == []  # per session where each session has its own uid
    worker = {"network_namespace", "mount_namespace", "user_namespace_no_caps", *private, *bounded}
    assert missing_layers({*worker, "pids_cgroup"}) == []
    assert missing_layers(worker) == ["pids_cgroup or rlimit_nproc"]
    # Without a memory cgroup a session's memory is bounded only per process: strict refuses.
    assert missing_layers({*root, "pids_cgroup"} - {"memory_cgroup"}) == ["memory_cgroup"]
    assert missing_layers({"rlimits", "ast_guard"}) == [
        "network_namespace",
        "mount_namespace",
        "allowlisted_root",
        "private_cell_mounts",
        "ipc_namespace",
        "cell_network_namespace",
        "dedicated_uid or user_namespace_no_caps",
        "pids_cgroup or rlimit_nproc",
        "memory_cgroup",
        "seccomp_filter",
    ]
