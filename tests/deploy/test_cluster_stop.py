"""scripts/cluster.py stops Airflow's processes as a container runtime does: SIGTERM to the service's main
process only, which shuts its own children down (a Celery worker drains its pool), then SIGKILL to whatever
of its group is left. SIGTERM sent to the whole group killed a worker's pool under it, and the worker then
outlived the grace period."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

from script_modules import load_script

# A service's main process: on SIGTERM it asks its child to finish (SIGINT, as a worker tells its pool) and
# exits once the child has. The child records a SIGTERM that reaches it directly. Each starts with no signal
# blocked or ignored, whatever the test runner's process had (they are inherited across exec), and says
# "ready" once its handlers are in place: the leader only after its child has.
LEADER = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    def stop(*_):
        child.send_signal(signal.SIGINT)
        child.wait()
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    print("ready", flush=True)
    time.sleep(120)
    """
)
CHILD = textwrap.dedent(
    """
    import pathlib, signal, sys, time
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    marker = pathlib.Path(sys.argv[1])
    signal.signal(signal.SIGTERM, lambda *_: marker.write_text("SIGTERM reached the child"))
    try:  # ready only inside: a SIGINT right after the word is still a drain
        print("ready", flush=True)
        time.sleep(120)
    except KeyboardInterrupt:
        marker.write_text(marker.read_text() + "; drained" if marker.exists() else "drained")
    """
)


def _service(tmp_path, name: str) -> tuple[subprocess.Popen, object]:
    proc = subprocess.Popen(
        [sys.executable, "-c", LEADER, CHILD, str(tmp_path / f"{name}.child")],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    pid_file = tmp_path / "pids" / name
    pid_file.parent.mkdir(exist_ok=True)
    pid_file.write_text(str(proc.pid))
    return proc, pid_file


def test_airflow_services_get_sigterm_on_their_main_process_and_drain_their_children(tmp_path):
    cluster = load_script("cluster")
    procs, entries = zip(*(_service(tmp_path, n) for n in ("worker-a", "worker-b")), strict=True)
    t0 = time.monotonic()
    cluster._stop_group(list(entries), leader_only=True)
    took = time.monotonic() - t0
    for proc in procs:
        assert proc.wait(timeout=5) == 0  # exited by its own handler, not killed
    for name in ("worker-a", "worker-b"):
        assert (tmp_path / f"{name}.child").read_text() == "drained"
        assert not cluster._alive(tmp_path / "pids" / name)
    assert took < 10  # well inside the 15 s SIGTERM grace: nothing waited it out


def test_a_group_that_ignores_sigterm_is_killed_whole(tmp_path, monkeypatch):
    cluster = load_script("cluster")
    monkeypatch.setattr(cluster, "STOP_GRACE_S", ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)))
    stubborn = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
         "print('ready', flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert stubborn.stdout.readline().strip() == "ready"
    entry = tmp_path / "stubborn"
    entry.write_text(str(stubborn.pid))
    t0 = time.monotonic()
    cluster._stop_group([entry], leader_only=True)
    assert 1.0 <= time.monotonic() - t0 < 5.0  # SIGTERM's grace waited out, then SIGKILL took it at once
    assert not cluster._alive(entry)  # (it reaps the process, so its exit status is not ours to read)


def test_remove_stops_the_services_and_deletes_the_state_outside_the_folder_too_but_keeps_the_logs(tmp_path):
    cluster = load_script("cluster")
    folder, pg_dir = tmp_path / "cluster", tmp_path / "elsewhere" / "pg"  # as root the database lives in /tmp
    (pg_dir / "base").mkdir(parents=True)
    (pg_dir / "PG_VERSION").write_text("17")
    folder.mkdir()
    c = cluster.Cluster(str(folder), 1, 2, 3, 4, "secret", pg_dir=str(pg_dir))
    c.save()
    (folder / "logs").mkdir()
    (folder / "logs" / "scheduler.log").write_text("what happened")
    (folder / "worker-a" / "home").mkdir(parents=True)
    proc, _ = _service(folder, "scheduler")

    stopped = cluster.remove(str(folder))

    assert stopped == ["scheduler"] and proc.wait(timeout=30) is not None
    assert not pg_dir.exists(), "the database outside the cluster's folder was left behind"
    assert sorted(p.name for p in folder.iterdir()) == ["logs"]
    assert (folder / "logs" / "scheduler.log").read_text() == "what happened"
