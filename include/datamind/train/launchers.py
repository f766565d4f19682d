"""Where a training run executes: a local subprocess (``torchrun``), a Kubernetes GPU pod, or a GPU host over SSH.

All three run the same command, ``torchrun ... -m datamind.train train --config-json <cfg>``, and
behind one interface: ``start(cfg)`` returns a ``RunHandle`` whose ``lines()`` streams the run's
output and whose ``wait()`` fails with ``LaunchError`` on a non-zero exit or returns a
``RunResult`` (checkpoint location and final metrics). The launcher kind is a setting; its
credentials come as a plain Connection-like dict (``host``, ``login``, ``password``, ``port``,
``extra``), and never appear in commands, manifests, logs or exceptions.

The run id is fixed before launch, so a retried task lands in the same run directory; remote
launchers need a data root they can reach (object storage or a mounted volume) and a model path that
exists where the trainer runs.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import fsspec

from datamind.settings import Settings
from datamind.storage import DataRoot
from datamind.train.config import LAUNCHERS, TrainConfig, derive_run_id
from datamind.train.protocol import RESULT_PREFIX, RunResult, manifest_path, result


class LaunchError(RuntimeError):
    """The run could not be started, or it ended without success."""


def prepare_config(cfg: TrainConfig) -> TrainConfig:
    """Pin the run id and data root before launch, so every retry and every rank agrees on them."""
    from datamind.train.exports import MANIFEST_FILE

    data_root = cfg.data_root or Settings.from_env().data_root
    if cfg.run_id:
        return cfg.with_overrides({"data_root": data_root}).validate()
    try:
        with fsspec.open(f"{cfg.export_dir.rstrip('/')}/{MANIFEST_FILE}", "rt") as fh:
            version = json.load(fh)["dataset_version"]
    except FileNotFoundError as exc:
        raise LaunchError(f"export manifest not found under {cfg.export_dir!r}; run the export first") from exc
    return cfg.with_overrides({"data_root": data_root, "run_id": derive_run_id(cfg, version)}).validate()


def trainer_args(cfg: TrainConfig) -> list[str]:
    return [
        "-m",
        "datamind.train",
        "train",
        "--config-json",
        json.dumps(cfg.to_dict(), sort_keys=True, separators=(",", ":")),
    ]


def train_argv(cfg: TrainConfig, nproc_per_node: int, torchrun: list[str], python: str = "python") -> list[str]:
    """``torchrun --standalone --nproc_per_node=N -m datamind.train train --config-json ...``; an engine other
    than the builtin one starts its own distributed launcher, so it gets ``python -m datamind.train ...``
    with ``NPROC_PER_NODE`` for it to read."""
    if cfg.engine != "builtin":
        return ["env", f"NPROC_PER_NODE={nproc_per_node}", python, *trainer_args(cfg)]
    # --log-dir=/dev/null: torchrun's agent otherwise leaves a folder in /tmp after every run (per-rank log
    # and error files this trainer does not use: its output is streamed, its result is the RESULT line)
    return [*torchrun, "--standalone", f"--nproc_per_node={nproc_per_node}", "--log-dir=/dev/null", *trainer_args(cfg)]


class RunHandle:
    """A started run: stream ``lines()``, then ``wait()``. ``wait()`` alone drains and discards output."""

    def __init__(self, cfg: TrainConfig, describe: str) -> None:
        self.cfg, self.describe = cfg, describe
        self.tail: collections.deque[str] = collections.deque(maxlen=40)
        self._result_line: str | None = None
        self._consumed = False

    # subclasses provide
    def _raw_lines(self) -> Iterator[str]:
        raise NotImplementedError

    def _exit_code(self) -> int:
        raise NotImplementedError

    def cancel(self) -> None:
        raise NotImplementedError

    def lines(self) -> Iterator[str]:
        if self._consumed:
            return
        self._consumed = True
        for line in self._raw_lines():
            line = line.rstrip("\r\n")
            self.tail.append(line)
            if line.startswith(RESULT_PREFIX):
                self._result_line = line
            yield line

    def wait(self) -> RunResult:
        for _ in self.lines():
            pass
        code = self._exit_code()
        if code != 0:
            tail = "\n".join(self.tail)
            raise LaunchError(
                f"training run {self.cfg.run_id} on {self.describe} exited with code {code}; last output:\n{tail}"
            )
        return self._result(code)

    def _result(self, code: int) -> RunResult:
        if self._result_line:
            data = result(self._result_line)
        else:  # output was lost (e.g. log stream cut): the manifest in the data root is the record
            root = DataRoot(self.cfg.data_root)
            manifest = json.loads(root.read_text(manifest_path(self.cfg.run_id)))
            if manifest.get("status") != "succeeded":
                raise LaunchError(f"run {self.cfg.run_id} exited 0 but its manifest says {manifest.get('status')!r}")
            data = manifest["result"]
        return RunResult.from_dict(data, exit_code=code)


class Launcher(Protocol):
    name: str

    def start(self, cfg: TrainConfig) -> RunHandle: ...


def run(launcher: Launcher, cfg: TrainConfig, on_line: Callable[[str], None] = print) -> RunResult:
    """Start, stream every output line to ``on_line``, wait; cancels the run if the caller is interrupted."""
    handle = launcher.start(cfg)
    try:
        for line in handle.lines():
            on_line(line)
        return handle.wait()
    except BaseException as exc:
        if not isinstance(exc, LaunchError):
            handle.cancel()
        raise


# -- local subprocess ----------------------------------------------------------------------------
class _ProcessHandle(RunHandle):
    def __init__(self, cfg: TrainConfig, describe: str, proc: subprocess.Popen) -> None:
        super().__init__(cfg, describe)
        self.proc = proc

    def _raw_lines(self) -> Iterator[str]:
        assert self.proc.stdout is not None
        yield from self.proc.stdout

    def _exit_code(self) -> int:
        return self.proc.wait()

    def cancel(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM if the launching process dies (Linux), so a killed Airflow
    task never leaves an orphaned training run holding GPUs. torchrun forwards the signal to its workers."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@dataclass
class LocalLauncher:
    """``torchrun`` on this worker (default); ``use_torchrun=False`` runs plain ``python -m`` for one process."""

    nproc_per_node: int = 1
    use_torchrun: bool = True
    python: str = sys.executable
    env: dict[str, str] = field(default_factory=dict)
    name: str = "local"

    def command(self, cfg: TrainConfig) -> list[str]:
        if self.use_torchrun:
            return train_argv(cfg, self.nproc_per_node, [self.python, "-m", "torch.distributed.run"], self.python)
        return [self.python, *trainer_args(cfg)]

    def start(self, cfg: TrainConfig) -> RunHandle:
        cfg = prepare_config(cfg)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", **self.env}
        proc = subprocess.Popen(
            self.command(cfg),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            env=env,
            start_new_session=True,
            errors="replace",
            preexec_fn=_die_with_parent,
        )
        return _ProcessHandle(cfg, "local worker", proc)


# -- SSH -------------------------------------------------------------------------------------------
@dataclass
class SSHLauncher:
    """Runs the trainer on a GPU host. Uses paramiko when it is installed, else the OpenSSH client.

    Connection: ``host``, ``login``, ``port``, ``password`` (paramiko only), ``extra.key_file``.
    Settings: ``workdir`` (checkout with the project installed), ``python`` (its interpreter).
    """

    connection: dict[str, Any]
    workdir: str = "."
    python: str = "python"
    nproc_per_node: int = 1
    env: dict[str, str] = field(default_factory=dict)
    ssh_binary: str = "ssh"
    prefer_paramiko: bool = True
    name: str = "ssh"

    def __post_init__(self) -> None:
        if not self.connection.get("host"):
            raise LaunchError("ssh launcher: the connection has no host")

    def __repr__(self) -> str:  # never print the connection (password)
        return f"SSHLauncher(host={self.connection.get('host')!r}, workdir={self.workdir!r})"

    @property
    def _extra(self) -> dict:
        return _extra(self.connection)

    def remote_command(self, cfg: TrainConfig) -> str:
        env = {"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", **self.env}
        argv = train_argv(cfg, self.nproc_per_node, [self.python, "-m", "torch.distributed.run"], self.python)
        assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        return f"cd {shlex.quote(self.workdir)} && exec env {assigns} {shlex.join(argv)}"

    def command(self, cfg: TrainConfig) -> list[str]:
        c = self.connection
        argv = [
            self.ssh_binary,
            "-T",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=accept-new",
            "-o",
            "ServerAliveInterval=30",
            "-p",
            str(c.get("port") or 22),
        ]
        if self._extra.get("key_file"):
            argv += ["-i", self._extra["key_file"]]
        target = f"{c['login']}@{c['host']}" if c.get("login") else c["host"]
        return [*argv, target, self.remote_command(cfg)]

    def start(self, cfg: TrainConfig) -> RunHandle:
        cfg = prepare_config(cfg)
        describe = f"ssh host {self.connection['host']}"
        if self.prefer_paramiko and importlib.util.find_spec("paramiko") is not None:
            return _ParamikoHandle(cfg, describe, self.connection, self.remote_command(cfg))
        if self.connection.get("password"):
            raise LaunchError(
                "ssh launcher: password authentication needs paramiko (not installed); "
                "use a key file (extra.key_file) or install paramiko"
            )
        proc = subprocess.Popen(
            self.command(cfg),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
            errors="replace",
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        return _ProcessHandle(cfg, describe, proc)


class _ParamikoHandle(RunHandle):
    def __init__(self, cfg: TrainConfig, describe: str, conn: dict, command: str) -> None:
        import paramiko

        super().__init__(cfg, describe)
        self.client = paramiko.SSHClient()
        self.client.set_missing_host_key_policy(paramiko.WarningPolicy())
        self.client.load_system_host_keys()
        try:
            self.client.connect(
                conn["host"],
                port=int(conn.get("port") or 22),
                username=conn.get("login"),
                password=conn.get("password") or None,
                key_filename=_extra(conn).get("key_file"),
                timeout=30,
            )
        except Exception as exc:  # paramiko's messages do not contain the password
            raise LaunchError(f"ssh connection to {conn['host']} failed: {type(exc).__name__}: {exc}") from None
        self.channel = self.client.get_transport().open_session()
        self.channel.set_combine_stderr(True)
        self.channel.exec_command(command)

    def _raw_lines(self) -> Iterator[str]:
        yield from self.channel.makefile("r", encoding="utf-8", errors="replace")

    def _exit_code(self) -> int:
        code = self.channel.recv_exit_status()
        self.client.close()
        return code

    def cancel(self) -> None:
        self.channel.close()  # the remote shell gets SIGHUP
        self.client.close()


# -- Kubernetes --------------------------------------------------------------------------------
_DNS = re.compile(r"[^a-z0-9-]+")


@dataclass
class KubernetesLauncher:
    """One pod per run with GPUs requested as ``nvidia.com/gpu``; submitted with the ``kubernetes`` client.

    Connection extra: ``namespace``, ``in_cluster`` or ``kube_config_path`` / ``context``.
    The image must contain this project; the data root and model path must be reachable from the pod
    (object storage, or ``volumes`` + ``volume_mounts``).
    """

    connection: dict[str, Any]
    image: str = ""
    gpus: int = 1
    cpu: str = "8"
    memory: str = "64Gi"
    shm_size: str = "16Gi"
    namespace: str | None = None
    gpu_resource: str = "nvidia.com/gpu"
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict] = field(default_factory=list)
    service_account: str | None = None
    image_pull_secrets: list[str] = field(default_factory=list)
    volumes: list[dict] = field(default_factory=list)
    volume_mounts: list[dict] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    active_deadline_s: int | None = None
    startup_timeout_s: float = 1800.0
    poll_s: float = 5.0
    name: str = "kubernetes"

    def __post_init__(self) -> None:
        self.image = self.image or _extra(self.connection).get("image", "")
        if not self.image:
            raise LaunchError("kubernetes launcher: no image (set image= or the connection's extra.image)")

    def __repr__(self) -> str:
        return f"KubernetesLauncher(namespace={self._namespace!r}, image={self.image!r}, gpus={self.gpus})"

    @property
    def _namespace(self) -> str:
        return self.namespace or _extra(self.connection).get("namespace") or "default"

    @staticmethod
    def pod_name(run_id: str) -> str:
        name = _DNS.sub("-", f"datamind-{run_id}".lower()).strip("-")
        return name[:63].rstrip("-")

    def pod_manifest(self, cfg: TrainConfig) -> dict:
        """A plain-dict V1Pod for ``cfg`` (``prepare_config`` it first so the run id is fixed)."""
        if not cfg.run_id:
            raise LaunchError("pod_manifest needs a config with a run id (use prepare_config)")
        env = {"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "DATAMIND_DATA_ROOT": cfg.data_root, **self.env}
        resources = {"cpu": self.cpu, "memory": self.memory, self.gpu_resource: str(self.gpus)}
        labels = {
            "app.kubernetes.io/name": "datamind",
            "app.kubernetes.io/component": "trainer",
            "datamind/run-id": _DNS.sub("-", cfg.run_id.lower())[:63].strip("-"),
        }
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "trainer",
                    "image": self.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": train_argv(cfg, self.gpus, ["torchrun"]),
                    "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
                    "resources": {"limits": dict(resources), "requests": dict(resources)},
                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, *self.volume_mounts],
                }
            ],
            # NCCL and dataloader workers need more shared memory than a container's 64 MiB default.
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": self.shm_size}}, *self.volumes],
            "tolerations": [
                {"key": self.gpu_resource, "operator": "Exists", "effect": "NoSchedule"},
                *self.tolerations,
            ],
        }
        if self.node_selector:
            spec["nodeSelector"] = dict(self.node_selector)
        if self.service_account:
            spec["serviceAccountName"] = self.service_account
        if self.image_pull_secrets:
            spec["imagePullSecrets"] = [{"name": s} for s in self.image_pull_secrets]
        if self.active_deadline_s:
            spec["activeDeadlineSeconds"] = int(self.active_deadline_s)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": self.pod_name(cfg.run_id), "namespace": self._namespace, "labels": labels},
            "spec": spec,
        }

    def _api(self):
        if importlib.util.find_spec("kubernetes") is None:
            raise LaunchError(
                "kubernetes launcher needs the 'kubernetes' Python client, which is not installed "
                "on this worker (pip install kubernetes); the pod manifest itself is available "
                "from KubernetesLauncher.pod_manifest()"
            )
        from kubernetes import client, config

        extra = _extra(self.connection)
        if extra.get("in_cluster"):
            config.load_incluster_config()
        else:
            config.load_kube_config(config_file=extra.get("kube_config_path"), context=extra.get("context"))
        return client.CoreV1Api()

    def start(self, cfg: TrainConfig) -> RunHandle:
        cfg = prepare_config(cfg)
        api = self._api()
        from kubernetes.client.rest import ApiException

        manifest = self.pod_manifest(cfg)
        name, ns = manifest["metadata"]["name"], self._namespace
        try:
            api.create_namespaced_pod(namespace=ns, body=manifest)
        except ApiException as exc:
            if exc.status != 409:
                raise LaunchError(f"creating pod {ns}/{name} failed: HTTP {exc.status} {exc.reason}") from None
            # A pod from an earlier attempt: follow it if it still runs, replace it if it finished.
            phase = api.read_namespaced_pod(name, ns).status.phase
            if phase in ("Succeeded", "Failed"):
                api.delete_namespaced_pod(name, ns, grace_period_seconds=0)
                self._wait_gone(api, name, ns)
                api.create_namespaced_pod(namespace=ns, body=manifest)
        return _PodHandle(cfg, f"pod {ns}/{name}", api, name, ns, self.startup_timeout_s, self.poll_s)

    def _wait_gone(self, api, name: str, ns: str) -> None:
        from kubernetes.client.rest import ApiException

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                api.read_namespaced_pod(name, ns)
            except ApiException as exc:
                if exc.status == 404:
                    return
                raise
            time.sleep(self.poll_s)
        raise LaunchError(f"old pod {ns}/{name} was not deleted within 120 s")


class _PodHandle(RunHandle):
    def __init__(self, cfg, describe, api, name, ns, startup_timeout_s, poll_s) -> None:
        super().__init__(cfg, describe)
        self.api, self.name, self.ns = api, name, ns
        self.startup_timeout_s, self.poll_s = startup_timeout_s, poll_s

    def _phase(self) -> str:
        return self.api.read_namespaced_pod(self.name, self.ns).status.phase

    def _raw_lines(self) -> Iterator[str]:
        deadline = time.monotonic() + self.startup_timeout_s
        while self._phase() == "Pending":
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"{self.describe} still Pending after {self.startup_timeout_s:g} s "
                    "(no GPU node free, or the image cannot be pulled)"
                )
            time.sleep(self.poll_s)
        resp = self.api.read_namespaced_pod_log(
            self.name, self.ns, container="trainer", follow=True, _preload_content=False
        )
        buf = ""
        for chunk in resp.stream():
            buf += chunk.decode("utf-8", "replace")
            *done, buf = buf.split("\n")
            yield from done
        if buf:
            yield buf

    def _exit_code(self) -> int:
        while (phase := self._phase()) not in ("Succeeded", "Failed"):
            time.sleep(self.poll_s)
        statuses = self.api.read_namespaced_pod(self.name, self.ns).status.container_statuses or []
        for st in statuses:
            if st.name == "trainer" and st.state and st.state.terminated:
                return int(st.state.terminated.exit_code)
        return 0 if phase == "Succeeded" else 1

    def cancel(self) -> None:
        self.api.delete_namespaced_pod(self.name, self.ns)


# -- factory -------------------------------------------------------------------------------------
def _extra(conn: dict | None) -> dict:
    extra = (conn or {}).get("extra") or {}
    return json.loads(extra) if isinstance(extra, str) else dict(extra)


_CLASSES = {"local": LocalLauncher, "kubernetes": KubernetesLauncher, "ssh": SSHLauncher}
_CREDENTIAL_KEYS = {"key_file", "kube_config_path", "context", "in_cluster", "namespace"}


def settings_from_connection(kind: str, connection: dict | None) -> dict[str, Any]:
    """Launcher options kept in the connection's ``extra`` (image, gpus, workdir, ...), credentials excluded."""
    cls = _CLASSES.get(kind)
    if cls is None:
        raise LaunchError(f"unknown launcher {kind!r}; choose one of {LAUNCHERS}")
    allowed = {f for f in cls.__dataclass_fields__} - {"connection", "name"}
    extra = _extra(connection)
    return {k: v for k, v in extra.items() if k in allowed and k not in _CREDENTIAL_KEYS}


def make_launcher(kind: str, connection: dict | None = None, **settings: Any) -> Launcher:
    """``kind`` is local | kubernetes | ssh; ``settings`` are the launcher's keyword options."""
    if kind == "local":
        return LocalLauncher(**settings)
    if kind == "kubernetes":
        return KubernetesLauncher(connection or {}, **settings)
    if kind == "ssh":
        if not connection:
            raise LaunchError("ssh launcher needs a connection (host, login, extra.key_file)")
        return SSHLauncher(connection, **settings)
    raise LaunchError(f"unknown launcher {kind!r}; choose one of {LAUNCHERS}")
