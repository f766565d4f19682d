"""The multi-worker deployment, run natively on one machine: what docker-compose.yaml describes, without docker.

    python scripts/cluster.py start [--dir .cluster] [--port 8080]   # PostgreSQL, Redis, S3 (moto), Airflow
    python scripts/cluster.py stop  [--dir .cluster]                 # stops every process it started
    python scripts/cluster.py remove [--dir .cluster]                # stops it, deletes its state, keeps logs
    python scripts/cluster.py status [--dir .cluster]

Services: PostgreSQL (metadata DB and Celery results), Redis (broker), an S3-compatible object store (moto) that
holds the data root (s3://datamind/root), and Airflow with the CeleryExecutor: api-server, scheduler,
dag-processor, triggerer and two Celery workers. Each worker has its own working directory and AIRFLOW_HOME, its
own name and loopback address (127.0.0.2, 127.0.0.3: task instances show which one ran them, and each serves its
task logs there), and no disk shared with the other: the data root is on the object store. Both serve
``default``; worker-b also serves ``gpu``. Airflow's settings come from config/cluster.env, the file the compose
file is checked against. ``start`` prints the UI URL, the login and the data root URL.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from datamind.llm.serving import free_port

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
BUCKET = "datamind"
WORKERS = {"worker-a": ("127.0.0.2", "default"), "worker-b": ("127.0.0.3", "default,gpu")}
# Started first and stopped last: what the Airflow processes report to (their pid files carry these names).
BACKING_SERVICES = ("postgres", "s3", "redis")
LOG_PORT = 8793
TINY_TRAINING = {
    "sft": {"batch_size": 2, "micro_batch_size": 2, "max_steps": 3, "learning_rate": 0.003},
    "rl": {
        "batch_size": 2,
        "mini_batch_size": 2,
        "max_steps": 2,
        "max_turns": 2,
        "max_turn_tokens": 48,
        "learning_rate": 0.001,
        # the tiny tokenizer (600 merges of the data's own text) spends about twice a real one's tokens on a prompt
        "max_prompt_length": 4096,
    },
}


@dataclass
class Cluster:
    dir: str
    ui_port: int
    pg_port: int
    redis_port: int
    s3_port: int
    jwt_secret: str
    user: str = "admin"
    password: str = ""
    train_env: dict = field(default_factory=dict)
    pg_dir: str = ""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    @property
    def data_root(self) -> str:
        return f"s3://{BUCKET}/root"

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def path(self, *parts: str) -> Path:
        return Path(self.dir, *parts)

    def save(self) -> None:
        self.path("cluster.json").write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, directory: str) -> Cluster:
        return cls(**json.loads(Path(directory, "cluster.json").read_text()))


def shared_settings(values: dict[str, str]) -> dict[str, str]:
    """config/cluster.env with ${NAME} filled from ``values``."""
    out = {}
    for line in (REPO / "config" / "cluster.env").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        for name, filled in values.items():
            value = value.replace("${" + name + "}", filled)
        out[key] = value
    return out


def airflow_env(c: Cluster, home: Path, **extra: str) -> dict[str, str]:
    c.path("lineage").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "DATAMIND_"))}
    env.update(
        shared_settings(
            {
                "POSTGRES_PASSWORD": "airflow",
                "POSTGRES_HOST": f"127.0.0.1:{c.pg_port}",
                "REDIS_HOST": f"127.0.0.1:{c.redis_port}",
                "API_HOST": f"127.0.0.1:{c.ui_port}",
            }
        )
    )
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
        AIRFLOW__CORE__PLUGINS_FOLDER=str(REPO / "plugins"),
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=f"{c.user}:admin",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(c.path("passwords.json")),
        AIRFLOW__API__PORT=str(c.ui_port),
        AIRFLOW__API__HOST="127.0.0.1",
        AIRFLOW__API__BASE_URL=c.base_url,
        AIRFLOW__API_AUTH__JWT_SECRET=c.jwt_secret,
        AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(LOG_PORT),
        AIRFLOW__CORE__PARALLELISM="8",
        AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="2",
        DATAMIND_DATA_ROOT=c.data_root,
        # every worker's OpenLineage events into one local file (the data root is a bucket)
        AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps(
            {"type": "file", "log_file_path": str(c.path("lineage", "events.jsonl")), "append": True}
        ),
        AIRFLOW__OPENLINEAGE__NAMESPACE="datamind",
        AWS_ACCESS_KEY_ID="cluster",
        AWS_SECRET_ACCESS_KEY="cluster-secret",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=c.s3_endpoint,
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        **c.train_env,
        **extra,
    )
    return env


def _wait(what: str, check, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s")


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _spawn(c: Cluster, name: str, argv: list[str], env: dict[str, str], cwd: Path, user: str | None = None) -> None:
    """Start a service in its own session; its pid goes to pids/<name> so stop() finds it."""
    cwd.mkdir(parents=True, exist_ok=True)
    if user and os.geteuid() == 0:
        argv = ["runuser", "-u", user, "--", *argv]
    log = open(c.path("logs", f"{name}.log"), "ab")
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=_clean_signals)  # fmt: skip
    c.path("pids", name).write_text(str(proc.pid))


def _clean_signals() -> None:
    """In the service's process before exec: no signal ignored or blocked, as a container runtime starts it.
    Both are inherited across exec (a shell running `make cluster` in the background ignores SIGINT; a test
    runner may block SIGTERM), and a service that inherited them outlived its stop's SIGTERM: every one of
    them waited out the grace period."""
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def _postgres_bin() -> Path:
    """The server binaries of the newest PostgreSQL the Debian packages installed."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if found:
        return found[-1].parent
    if shutil.which("initdb"):
        return Path(shutil.which("initdb")).parent
    raise RuntimeError("PostgreSQL is not installed (scripts/install_system_deps.sh installs it)")


def _postgres(c: Cluster) -> None:
    pg_bin = _postgres_bin()
    user = "postgres" if os.geteuid() == 0 else None  # PostgreSQL refuses to run as root
    run_as = ["runuser", "-u", user, "--"] if user else []
    if not c.pg_dir:
        # as root the server runs as `postgres`, which must reach its folder: one under /tmp, not under ours
        c.pg_dir = tempfile.mkdtemp(prefix="datamind-cluster-pg-") if user else str(c.path("postgres"))
        c.save()
    data = Path(c.pg_dir)
    if not (data / "PG_VERSION").exists():
        data.mkdir(parents=True, exist_ok=True)
        if user:
            shutil.chown(data, user, user)
        subprocess.run([*run_as, str(pg_bin / "initdb"), "-D", str(data), "-A", "trust", "-U", "airflow"], check=True,
                       capture_output=True)  # fmt: skip
    _spawn(
        c,
        "postgres",
        [str(pg_bin / "postgres"), "-D", str(data), "-p", str(c.pg_port), "-h", "127.0.0.1", "-k", str(data)],
        dict(os.environ),
        data,
        user,
    )
    _wait("PostgreSQL", lambda: _port_open(c.pg_port))
    psql = [*run_as, str(pg_bin / "psql"), "-h", "127.0.0.1", "-p", str(c.pg_port), "-U", "airflow", "-d", "postgres"]
    exists = subprocess.run([*psql, "-tAc", "SELECT 1 FROM pg_database WHERE datname='airflow'"],
                            capture_output=True, text=True)  # fmt: skip
    if exists.stdout.strip() != "1":
        subprocess.run([*psql, "-c", "CREATE DATABASE airflow"], check=True, capture_output=True)


def _object_store(c: Cluster) -> None:
    _spawn(c, "s3", [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(c.s3_port)], dict(os.environ), c.path("s3"))
    _wait("the S3 server", lambda: _port_open(c.s3_port))
    import boto3

    s3 = boto3.client("s3", endpoint_url=c.s3_endpoint, aws_access_key_id="cluster",
                      aws_secret_access_key="cluster-secret", region_name="us-east-1")  # fmt: skip
    if BUCKET not in [b["Name"] for b in s3.list_buckets().get("Buckets", [])]:
        s3.create_bucket(Bucket=BUCKET)


def start(directory: str, ui_port: int = 8080) -> Cluster:
    Path(directory).mkdir(parents=True, exist_ok=True)
    directory = str(Path(directory).resolve())
    for sub in ("logs", "pids"):
        Path(directory, sub).mkdir(exist_ok=True)
    c = Cluster(directory, ui_port, free_port(), free_port(), free_port(), secrets.token_urlsafe(64))
    c.save()
    _postgres(c)
    _spawn(c, "redis", ["redis-server", "--port", str(c.redis_port), "--bind", "127.0.0.1", "--save", ""],
           dict(os.environ), c.path("redis"))  # fmt: skip
    _wait("Redis", lambda: _port_open(c.redis_port))
    _object_store(c)

    # The `gpu` worker trains a tiny random model on its CPU: a few steps of SFT and RL prove the chain.
    model = c.path("worker-b", "models", "tiny")
    if not (model / "config.json").exists():
        subprocess.run([str(BIN / "python"), "-m", "datamind.train.tiny", str(model)], check=True, capture_output=True)
    c.train_env = {"DATAMIND_BASE_MODEL_PATH": str(model), "DATAMIND_TRAIN_OVERRIDES": json.dumps(TINY_TRAINING)}
    control = c.path("control")
    env = airflow_env(c, control)
    control.mkdir(exist_ok=True)
    airflow = str(BIN / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True)
    subprocess.run([airflow, "pools", "set", "gpu", "1", "One slot per GPU for train_agent"], env=env, check=True,
                   capture_output=True)  # fmt: skip
    for component in ("api-server", "scheduler", "dag-processor", "triggerer"):
        _spawn(c, component, [airflow, component], env, control)
    for name, (address, queues) in WORKERS.items():
        home = c.path(name)
        wenv = airflow_env(c, home, DATAMIND_WORKER_HOSTNAME=address, TMPDIR=str(home / "tmp"))
        (home / "tmp").mkdir(parents=True, exist_ok=True)
        _spawn(c, name, [airflow, "celery", "worker", "--queues", queues, "--concurrency", "2", "--skip-serve-logs",
                         "--celery-hostname", f"{name}@%h"], wenv, home)  # fmt: skip
        # Its own log server on its own address: the api-server fetches a task's log from the worker it names.
        _spawn(c, f"{name}-logs", [str(BIN / "python"), "-m", "uvicorn", "airflow.utils.serve_logs.log_server:get_app",
                                   "--factory", "--host", address, "--port", str(LOG_PORT), "--no-access-log"],
               wenv, home)  # fmt: skip
    _wait("the api-server", lambda: _health(c), timeout=180)
    c.password = json.loads(c.path("passwords.json").read_text())[c.user]
    c.save()
    return c


def _health(c: Cluster) -> bool:
    import urllib.request

    with urllib.request.urlopen(f"{c.base_url}/api/v2/monitor/health", timeout=2) as r:
        return r.status == 200


def stop(directory: str) -> list[str]:
    """Stop every process start() recorded (and their children), newest first; returns their names."""
    pids = Path(directory, "pids")
    stopped = []
    entries = sorted(pids.glob("*"), key=lambda p: p.stat().st_mtime, reverse=True) if pids.is_dir() else []
    # Airflow's processes first, all at once, then what they report to: a worker or scheduler reports its
    # shutdown to the broker and the database, which must still be up for it to do so.
    airflow = [e for e in entries if e.name not in BACKING_SERVICES]
    # A Celery worker shuts down warmly when its main process alone gets SIGTERM; sent to its whole group, the
    # pool's children die under it and the worker waited out the grace period. Airflow's processes are told
    # as a container runtime tells them (the leader only), then their whole group is killed if still there.
    _stop_group(airflow, leader_only=True)
    _stop_group([e for e in entries if e not in airflow])
    for entry in entries:
        stopped.append(entry.name)
        entry.unlink()
    return stopped


def remove(directory: str) -> list[str]:
    """Stop the cluster, then delete its state (database, bucket, worker folders) but not its logs; returns the
    names of the processes stopped. As root the database lives under /tmp (PostgreSQL's own user must reach
    it), outside the cluster's folder: it goes too."""
    stopped = stop(directory)
    state = Path(directory, "cluster.json")
    pg_dir = Cluster.load(directory).pg_dir if state.exists() else ""
    if pg_dir:
        shutil.rmtree(pg_dir, ignore_errors=True)
    for entry in Path(directory).iterdir() if Path(directory).is_dir() else []:
        if entry.name == "logs":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    return stopped


# How long a service is given to exit after each signal.
STOP_GRACE_S = ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0))


def _stop_group(entries: list[Path], leader_only: bool = False) -> None:
    for sig, grace in STOP_GRACE_S:
        kill = os.kill if leader_only and sig == signal.SIGTERM else os.killpg
        for entry in entries:
            try:
                kill(int(entry.read_text()), sig)
            except (ProcessLookupError, ValueError, PermissionError):
                continue
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(e) for e in entries):
            time.sleep(0.1)
        late = [e for e in entries if _alive(e)]
        if not late:
            return
        for e in late:  # which of its processes, so the cause can be found
            left = "; ".join(f"{pid} {cmd}" for pid, cmd in _group_processes(int(e.read_text())))
            print(f"cluster: {e.name} outlived {sig.name} for {grace:.0f} s: {left}", file=sys.stderr)


def _group_processes(pgid: int) -> list[tuple[int, str]]:
    """The processes of a process group (pid, command line, cut short)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[2]) != pgid:  # the 5th field, after "pid (comm) state ppid"
                continue
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError, IndexError):
            continue
        found.append((int(d.name), cmd[:160] or stat.split(" ", 2)[1]))
    return sorted(found)


def _alive(entry: Path) -> bool:
    try:
        pid = int(entry.read_text())
        try:  # a leader this process started stays a zombie, and its group "alive", until it is reaped
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        os.killpg(pid, 0)
        return True
    except (ProcessLookupError, ValueError, FileNotFoundError):
        return False
    except PermissionError:
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["start", "stop", "remove", "status"])
    parser.add_argument("--dir", default=str(REPO / ".cluster"), help="working directory of the cluster")
    parser.add_argument("--port", type=int, default=8080, help="port of the Airflow UI / API")
    args = parser.parse_args(argv)
    if args.command == "start":
        if Path(args.dir, "pids").is_dir() and any(Path(args.dir, "pids").iterdir()):
            print(f"a cluster is already running from {args.dir}; `make cluster-stop` first", file=sys.stderr)
            return 1
        c = start(args.dir, args.port)
        print(f"Airflow UI:  {c.base_url}  (login {c.user} / {c.password})")
        print(f"Data root:   {c.data_root}  (S3 endpoint {c.s3_endpoint})")
        print(f"Workers:     {', '.join(f'{n} at {a} ({q})' for n, (a, q) in WORKERS.items())}")
        print(f"Logs:        {c.path('logs')}/   stop with: make cluster-stop")
        return 0
    if args.command in ("stop", "remove"):
        names = (stop if args.command == "stop" else remove)(args.dir)
        print(f"stopped {len(names)} process(es): {', '.join(names) or 'none'}")
        return 0
    running = [p.name for p in Path(args.dir, "pids").glob("*") if _alive(p)] if Path(args.dir, "pids").is_dir() else []
    print(f"running: {', '.join(sorted(running)) or 'nothing'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
