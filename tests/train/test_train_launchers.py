"""Launchers: real subprocesses for local and SSH (an ``ssh`` stand-in that runs the remote command
locally, as sshd would), the Kubernetes pod manifest checked field by field."""

import importlib.util
import json
import os
import shlex
import stat
import sys
import time
from pathlib import Path

import pytest

from datamind.train.config import TrainConfig
from datamind.train.launchers import (
    KubernetesLauncher,
    LaunchError,
    LocalLauncher,
    SSHLauncher,
    make_launcher,
    prepare_config,
    run,
    settings_from_connection,
)
from datamind.train.protocol import progress

REPO = Path(__file__).resolve().parents[2]


def _cfg(model_dir, res, root, **over):
    base = {
        "base_model_path": model_dir,
        "export_dir": res.export_dir,
        "data_root": root.url,
        "phase": "sft",
        "sft": {"learning_rate": 3e-3, "batch_size": 2, "micro_batch_size": 2, "max_steps": 2},
    }
    return TrainConfig.from_dict(base).with_overrides(over)


def test_local_torchrun_streams_and_returns_checkpoint(tiny_model_dir, exported):
    root, res = exported
    lines = []
    result = run(LocalLauncher(), _cfg(tiny_model_dir, res, root), on_line=lines.append)
    steps = [progress(line) for line in lines if progress(line)]
    assert [s["step"] for s in steps] == [1, 2]
    assert result.exit_code == 0 and result.final_metrics["step"] == 2
    assert os.path.exists(os.path.join(result.checkpoint_uri, "checkpoint.json"))
    assert json.load(open(result.manifest_uri))["status"] == "succeeded"
    # The run id was fixed before launch: a retry of the same config lands in the same run directory.
    assert result.run_id == prepare_config(_cfg(tiny_model_dir, res, root)).run_id


class Scripted(LocalLauncher):
    """The local launcher running an arbitrary child, to exercise streaming, exit codes and cancel."""

    def __init__(self, code):
        super().__init__(use_torchrun=False)
        self.code = code

    def command(self, cfg):
        return [sys.executable, "-c", self.code]


def test_nonzero_exit_and_missing_result(exported, tiny_model_dir):
    root, res = exported
    cfg = _cfg(tiny_model_dir, res, root)
    with pytest.raises(LaunchError, match=r"exited with code 3[\s\S]*boom"):
        run(Scripted("print('boom'); raise SystemExit(3)"), cfg, on_line=lambda _: None)
    with pytest.raises(FileNotFoundError):  # exit 0 but no result line and no manifest
        run(Scripted("print('quiet')"), cfg, on_line=lambda _: None)


def test_interrupted_caller_cancels_the_run(exported, tiny_model_dir):
    root, res = exported
    launcher = Scripted("import time; print('started', flush=True); time.sleep(60)")
    handle = launcher.start(_cfg(tiny_model_dir, res, root))

    class Stop(Exception):
        pass

    def on_line(line):
        raise Stop

    launcher.start = lambda cfg: handle
    t0 = time.monotonic()
    with pytest.raises(Stop):
        run(launcher, _cfg(tiny_model_dir, res, root), on_line=on_line)
    assert handle.proc.poll() is not None and time.monotonic() - t0 < 30


@pytest.fixture
def fake_ssh(tmp_path):
    """Stands in for the OpenSSH client: records its argv and runs the remote command with sh, as sshd does."""
    log = tmp_path / "ssh-argv.json"
    script = tmp_path / "ssh"
    script.write_text(f"""#!{sys.executable}
import json, subprocess, sys
json.dump(sys.argv[1:], open({str(log)!r}, "w"))
sys.exit(subprocess.call(["sh", "-c", sys.argv[-1]]))
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, log


def test_ssh_runs_the_trainer_on_the_host_and_reports_its_failure(tiny_model_dir, exported, fake_ssh, tmp_path):
    """The remote command really runs the trainer; a bad model path there comes back as a clear error."""
    root, res = exported
    script, log = fake_ssh
    conn = {"host": "gpu-1", "login": "trainer", "port": 2222, "extra": {"key_file": "/keys/id_ed25519"}}
    launcher = SSHLauncher(
        conn,
        workdir=str(REPO),
        python=sys.executable,
        ssh_binary=str(script),
        prefer_paramiko=False,
        env={"OMP_NUM_THREADS": "1"},
    )
    cfg = _cfg(str(tmp_path / "not-on-this-host"), res, root)
    with pytest.raises(LaunchError, match=r"on ssh host gpu-1 exited with code 1[\s\S]*not a local directory"):
        run(launcher, cfg, on_line=lambda _: None)
    argv = json.load(open(log))
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-i") + 1] == "/keys/id_ed25519"
    assert "BatchMode=yes" in argv and argv[-2] == "trainer@gpu-1"
    remote = shlex.split(argv[-1])
    cfg_json = json.loads(remote[remote.index("--config-json") + 1])
    assert cfg_json == prepare_config(cfg).to_dict()
    assert remote[:2] == ["cd", str(REPO)] and "torch.distributed.run" in remote


@pytest.mark.skipif(importlib.util.find_spec("paramiko") is not None, reason="paramiko installed")
def test_ssh_password_needs_paramiko_and_is_never_shown(tiny_model_dir, exported):
    root, res = exported
    launcher = SSHLauncher({"host": "gpu-1", "login": "u", "password": "hunter2-secret"})
    with pytest.raises(LaunchError, match="paramiko") as err:
        launcher.start(_cfg(tiny_model_dir, res, root))
    assert "hunter2-secret" not in str(err.value) and "hunter2-secret" not in repr(launcher)


def test_kubernetes_pod_manifest(tiny_model_dir, exported):
    root, res = exported
    conn = {"extra": json.dumps({"namespace": "ml", "image": "registry/datamind:1.2", "kube_config_path": "/k"})}
    launcher = KubernetesLauncher(
        conn,
        gpus=4,
        cpu="16",
        memory="128Gi",
        node_selector={"gpu": "h100"},
        service_account="trainer",
        image_pull_secrets=["regcred"],
        env={"DATAMIND_EXTRA": "1"},
        active_deadline_s=86400,
    )
    cfg = prepare_config(_cfg(tiny_model_dir, res, root, run_id="Train_ABC.1"))
    pod = launcher.pod_manifest(cfg)
    assert pod["apiVersion"] == "v1" and pod["kind"] == "Pod"
    assert pod["metadata"]["namespace"] == "ml" and pod["metadata"]["name"] == "datamind-train-abc-1"
    assert pod["metadata"]["labels"]["datamind/run-id"] == "train-abc-1"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["nodeSelector"] == {"gpu": "h100"}
    assert spec["serviceAccountName"] == "trainer" and spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["activeDeadlineSeconds"] == 86400
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    (c,) = spec["containers"]
    assert c["image"] == "registry/datamind:1.2"
    assert c["resources"]["limits"] == {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "4"}
    assert c["resources"]["requests"] == c["resources"]["limits"]
    # the agent writes no log folder of its own (it would pile up in /tmp on a long-lived host)
    assert c["command"][:4] == ["torchrun", "--standalone", "--nproc_per_node=4", "--log-dir=/dev/null"]
    assert c["command"][4:8] == ["-m", "datamind.train", "train", "--config-json"]
    assert json.loads(c["command"][8])["run_id"] == "Train_ABC.1"
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["DATAMIND_DATA_ROOT"] == root.url and env["HF_HUB_OFFLINE"] == "1" and env["DATAMIND_EXTRA"] == "1"
    shm = next(v for v in spec["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    json.dumps(pod)  # plain data, ready for the API
    assert len(KubernetesLauncher.pod_name("x" * 100)) == 63


@pytest.mark.skipif(importlib.util.find_spec("kubernetes") is not None, reason="kubernetes client installed")
def test_kubernetes_without_client_fails_clearly(tiny_model_dir, exported):
    root, res = exported
    launcher = make_launcher("kubernetes", {"extra": {"image": "img"}})
    with pytest.raises(LaunchError, match="'kubernetes' Python client"):
        launcher.start(_cfg(tiny_model_dir, res, root))


def test_factory_and_preconditions(tmp_path):
    with pytest.raises(LaunchError, match="unknown launcher"):
        make_launcher("slurm")
    with pytest.raises(LaunchError, match="needs a connection"):
        make_launcher("ssh")
    with pytest.raises(LaunchError, match="no image"):
        make_launcher("kubernetes", {})
    assert isinstance(make_launcher("local", None, nproc_per_node=2), LocalLauncher)
    ssh_conn = {"host": "h", "password": "pw", "extra": {"key_file": "/k", "workdir": "/srv/dm", "bogus": 1}}
    assert settings_from_connection("ssh", ssh_conn) == {"workdir": "/srv/dm"}
    k8s_conn = {"extra": json.dumps({"namespace": "ml", "image": "img", "gpus": 8, "in_cluster": True})}
    assert settings_from_connection("kubernetes", k8s_conn) == {"image": "img", "gpus": 8}
    assert settings_from_connection("local", {"extra": {"use_torchrun": False}}) == {"use_torchrun": False}
    cfg = TrainConfig(base_model_path="/m", export_dir=str(tmp_path / "no-export"), data_root=str(tmp_path))
    with pytest.raises(LaunchError, match="run the export first"):
        prepare_config(cfg)


def test_run_does_not_outlive_a_killed_launcher(exported, tiny_model_dir, tmp_path):
    """SIGKILL the process that launched a run (as when a worker dies): the run must stop too."""
    import signal
    import subprocess

    root, res = exported
    cfg_json = json.dumps(_cfg(tiny_model_dir, res, root).to_dict())
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"""
import json, sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_train_launchers import Scripted
from datamind.train.config import TrainConfig
h = Scripted("import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)").start(
    TrainConfig.from_dict(json.loads({cfg_json!r})))
time.sleep(120)
""",
        ]
    )
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    child = int(pid_file.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as fh:  # a zombie (exited, not yet reaped by init) also counts
            if fh.read().split()[2] == "Z":
                break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the launched run survived its launcher")
