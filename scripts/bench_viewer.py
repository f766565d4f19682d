"""The sample viewer on a large release, through a real api-server: first-page time and the server's memory.

    python scripts/bench_viewer.py                 # 100,000 samples
    python scripts/bench_viewer.py --samples 2000  # what CI can afford, so the script cannot rot

The release is made the way ``scripts/bench_scale.py`` makes its inputs: the real offline pipeline runs over
generated source files (its template), publishing writes a real release, and its rows are cloned with every
sample id rewritten until the release holds ``--samples`` rows, in 5,000-row Parquet parts, beside the real
manifest (its audit is the template's). Then ``airflow api-server`` starts with the plugin, and each page is
fetched five times over HTTP with a bearer token: the release's first page, a page filtered by category and
hop, a free-text search, a deep page, and one sample. It prints the median and spread of each, and the
api-server's resident memory (its whole process group) before the first request and after the last.
It asserts nothing about time: the figures are the output.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "include"))
sys.path.insert(0, str(REPO / "scripts"))

PART_ROWS = 5000


def build_release(base: Path, samples: int, template_files: int) -> tuple[Path, str, int]:
    import bench_scale
    import pyarrow.parquet as pq

    from datamind.ids import stable_id
    from datamind.publish.stage import publish_dataset
    from datamind.schemas import DATASET
    from datamind.shards import table_to_parquet_bytes
    from datamind.storage import DataRoot

    t0 = time.perf_counter()
    bench_scale.build_template(base, template_files)
    root_dir = base / "root"
    root = DataRoot(str(root_dir))
    manifest = publish_dataset(root, "bench-template")
    parts = sorted((root_dir / "dataset" / f"v{manifest['version']}").glob("part-*.parquet"))
    template = [row for part in parts for row in pq.read_table(part).to_pylist()]
    print(
        f"template release: {len(template)} samples from {template_files} files in {time.perf_counter() - t0:.0f} s",
        file=sys.stderr,
    )
    version = manifest["version"] + 1
    vdir = root_dir / "dataset" / f"v{version}"
    vdir.mkdir(parents=True)
    shutil.copytree(root_dir / "dataset" / f"v{manifest['version']}" / "files", vdir / "files")
    part, written, copy = [], 0, 0
    while written < samples:
        for row in template:
            if written >= samples:
                break
            # each clone's text differs (its copy number in the question and the task), as real samples do, so
            # the parts are as large as a real release of this size and no page is served from shared pages
            mark = f" [copy {copy}]"
            messages = [
                {**m, "content": m["content"] + mark if m["role"] in ("user", "assistant") else m["content"]}
                for m in row["messages"]
            ]
            part.append(
                {**row, "sample_id": stable_id(row["sample_id"], copy), "question": row["question"] + mark,
                 "messages": messages}
            )  # fmt: skip
            written += 1
            if len(part) == PART_ROWS:
                (vdir / f"part-{(written - 1) // PART_ROWS:05d}.parquet").write_bytes(
                    table_to_parquet_bytes(DATASET.to_table(part))
                )
                part = []
        copy += 1
    if part:
        (vdir / f"part-{(written - 1) // PART_ROWS:05d}.parquet").write_bytes(
            table_to_parquet_bytes(DATASET.to_table(part))
        )
    big = {**manifest, "version": version, "version_id": f"v{version}", "n_samples": written}
    (vdir / "manifest.json").write_text(json.dumps(big, indent=2, default=str))
    return root_dir, f"v{version}", written


def _group_rss_mb(pgid: int) -> float:
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getpgid(int(entry)) != pgid:
                continue
            status = Path(f"/proc/{entry}/status").read_text()
        except (OSError, ProcessLookupError):
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def start_api_server(root_dir: Path, home: Path) -> tuple[subprocess.Popen, str, dict]:
    import requests

    from datamind.llm.serving import free_port

    port = free_port()
    env = dict(os.environ)
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
        AIRFLOW__CORE__PLUGINS_FOLDER=str(REPO / "plugins"),
        AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="bench:admin",
        AIRFLOW__API__PORT=str(port),
        DATAMIND_DATA_ROOT=str(root_dir),
        PATH=f"{REPO / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
    )
    (home / "dags").mkdir(parents=True, exist_ok=True)
    airflow = str(REPO / ".venv" / "bin" / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True)
    proc = subprocess.Popen(
        [airflow, "api-server", "--port", str(port), "--workers", "1"],
        env=env,
        stdout=open(home / "api-server.log", "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{base}/api/v2/monitor/health", timeout=2).ok:
                break
        except requests.ConnectionError:
            pass
        time.sleep(1)
    else:
        raise SystemExit("api-server did not start:\n" + (home / "api-server.log").read_text()[-2000:])
    password = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())["bench"]
    token = requests.post(f"{base}/auth/token", json={"username": "bench", "password": password}, timeout=60).json()
    return proc, base, {"Authorization": f"Bearer {token['access_token']}"}


def timed(url: str, headers: dict, repeats: int) -> tuple[list[float], str]:
    import requests

    times, text = [], ""
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = requests.get(url, headers=headers, timeout=120)
        times.append(time.perf_counter() - t0)
        r.raise_for_status()
        text = r.text
    return times, text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--samples", type=int, default=100_000, help="rows of the release the viewer opens")
    ap.add_argument("--template-files", type=int, default=8, help="source files the real pipeline runs over")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-viewer-"))
    proc = None
    try:
        root_dir, version, n = build_release(base, args.samples, args.template_files)
        size = sum(p.stat().st_size for p in (root_dir / "dataset" / version).glob("part-*.parquet"))
        print(f"release {version}: {n:,} samples in {n // PART_ROWS + 1} parts, {size / 2**20:.0f} MB", file=sys.stderr)
        proc, base_url, headers = start_api_server(root_dir, base / "airflow_home")
        time.sleep(2)
        rss_before = _group_rss_mb(proc.pid)
        viewer = f"{base_url}/datamind/viewer/releases/{version}/"
        first, text = timed(viewer, headers, args.repeats)
        import re

        sample = re.search(r"/samples/([0-9a-f]+)'", text[text.index("matching samples") :]).group(1)
        category = re.search(r"<option value='([a-z_]+)'>", text[text.index("name='category'") :]).group(1)
        pages = {
            "first page": first,
            "category + hop filter": timed(f"{viewer}?category={category}&hop=2", headers, args.repeats)[0],
            "text search": timed(f"{viewer}?q=median", headers, args.repeats)[0],
            "page 1,000": timed(f"{viewer}?page=1000", headers, args.repeats)[0],
            "one sample": timed(f"{viewer}samples/{sample}", headers, args.repeats)[0],
        }
        rss_after = _group_rss_mb(proc.pid)
        print(f"\nsample viewer, release of {n:,} samples, {args.repeats} requests each (seconds):")
        print(f"{'page':<24}{'median':>10}{'min':>10}{'max':>10}")
        for name, ts in pages.items():
            print(f"{name:<24}{statistics.median(ts):>10.3f}{min(ts):>10.3f}{max(ts):>10.3f}")
        print(
            f"\napi-server RSS (process group): {rss_before:.0f} MB before the first request, {rss_after:.0f} MB after "
            f"the last ({rss_after - rss_before:+.0f} MB); the release's Parquet parts hold {size / 2**20:.0f} MB"
        )
    finally:
        if proc is not None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
