"""LLM-stage throughput against a local OpenAI-protocol server with fixed latency.

With every response taking ``latency`` seconds and ``concurrency`` requests in flight, no client can beat
``concurrency / latency`` requests per second; this prints how close the LLM layer gets (median over
repeats), with the response cache on (the real stage: a cache lookup and an fsynced write per call) and
off, then the wall time of a rerun answered entirely from the cache.

The server runs in its own process so the client's CPU cost is what is measured.

    .venv/bin/python scripts/bench_llm.py [--latency 0.2] [--concurrency 32] [--requests 800] [--repeats 3]
                                          [--backend auto|httpx|aiohttp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from datamind.llm import LLMClient, LLMConfig, ResponseCache, extract_tag, run_all  # noqa: E402
from datamind.llm.client import aiohttp_available  # noqa: E402
from datamind.storage import DataRoot  # noqa: E402

TEMPLATE = "bench-v1"


def start_server(latency: float) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "fakes" / "openai_server.py"), "--latency", str(latency)],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"fake server did not start: {line!r}")
    return proc, int(line.split()[1])


def process_cpu_s(pid: int) -> float:
    """User+system CPU seconds of another process (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def prompts(n: int, salt: str) -> list[list[dict]]:
    table = "\n".join(f"| {i} | item-{i} | {i * 3.5:.1f} |" for i in range(40))  # ~1 KB like a table preview
    return [
        [
            {
                "role": "system",
                "content": "You write one data-analysis question about the table. Reply in <answer> tags.",
            },
            {"role": "user", "content": f"[{salt}:{i}]\n| id | name | value |\n{table}"},
        ]
        for i in range(n)
    ]


def run_batch(client: LLMClient, batch: list[list[dict]], use_cache: bool) -> tuple[float, list[float]]:
    parse = lambda text: extract_tag(text, "answer")  # noqa: E731
    if use_cache:
        coros = [client.chat_parsed("synthesizer", m, parse, template_version=TEMPLATE) for m in batch]
    else:
        coros = [client.chat("synthesizer", m, template_version=TEMPLATE, use_cache=False) for m in batch]
    t0 = time.perf_counter()
    results = run_all(coros, client=client)
    wall = time.perf_counter() - t0
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed, first: {failed[0]!r}")
    latencies = [(r.results[-1] if hasattr(r, "results") else r).latency_s for r in results]
    return wall, latencies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--requests", type=int, default=800)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--backend", choices=["auto", "httpx", "aiohttp"], default="auto", help="HTTP transport under openai"
    )
    args = ap.parse_args()

    ideal = args.concurrency / args.latency
    proc, port = start_server(args.latency)
    tmp = tempfile.mkdtemp(prefix="bench_llm_")
    try:
        config = LLMConfig(
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key="bench",
            models={"synthesizer": "bench-model"},
            max_concurrency=args.concurrency,
            timeout_s=30,
            http_backend=args.backend,
        )
        rows: dict[str, list[float]] = {"cache on": [], "cache off": [], "rerun (all hits)": []}
        latencies: dict[str, list[float]] = {"cache on": [], "cache off": []}
        cpu0, load0 = time.process_time(), os.getloadavg()[0]  # others share these cores: show how busy they were
        for rep in range(args.repeats):
            root = DataRoot(os.path.join(tmp, f"rep{rep}"))
            batch = prompts(args.requests, f"rep{rep}")
            for name, client, work, cached in (
                ("cache on", LLMClient(config, cache=ResponseCache(root)), batch, True),
                ("cache off", LLMClient(config), prompts(args.requests, f"off{rep}"), False),
            ):
                wall, lat = run_batch(client, work, cached)
                rows[name].append(wall)
                latencies[name] += lat
            rerun = LLMClient(config, cache=ResponseCache(root))
            rows["rerun (all hits)"].append(run_batch(rerun, batch, True)[0])
            if rerun.usage.calls != 0 or rerun.usage.cached_calls != args.requests:
                raise RuntimeError(f"rerun made {rerun.usage.calls} new calls; expected 0")

        fresh_calls = 2 * args.requests * args.repeats
        print(f"CPU per fresh call (all phases): client {1000 * (time.process_time() - cpu0) / fresh_calls:.2f} ms, "
              f"fake server {1000 * process_cpu_s(proc.pid) / fresh_calls:.2f} ms (both on these cores)")  # fmt: skip
        backend = (
            "aiohttp" if args.backend == "aiohttp" or (args.backend == "auto" and aiohttp_available()) else "httpx2"
        )
        print(f"backend={backend} cpus={os.cpu_count()} loadavg start={load0:.2f} end={os.getloadavg()[0]:.2f} "
              f"requests={args.requests} "
              f"concurrency={args.concurrency} latency={args.latency * 1000:.0f}ms repeats={args.repeats}")  # fmt: skip
        print(f"ideal = concurrency/latency = {ideal:.1f} req/s (floor {args.requests / ideal:.2f} s per batch)")
        for name in ("cache on", "cache off"):
            med = statistics.median(rows[name])
            rps = args.requests / med
            best = args.requests / min(rows[name]) / ideal
            print(f"{name:>17}: median wall {med:.2f} s  {rps:.1f} req/s  fraction of ideal {rps / ideal:.1%} "
                  f"(best run {best:.1%})  "
                  f"(walls {', '.join(f'{w:.2f}' for w in rows[name])}); request latency median "
                  f"{1000 * statistics.median(latencies[name]):.0f} ms")  # fmt: skip
        med = statistics.median(rows["rerun (all hits)"])
        print(f" rerun (all hits): median wall {med:.3f} s for {args.requests} cached calls, 0 new requests "
              f"({args.requests / med:.0f} items/s)")  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
