"""How close the LLM stages come to the server's own generation rate, on a real model, in one run.

    .venv/bin/python scripts/bench_llm_stages.py                        # the catalogue's teacher, served here
    .venv/bin/python scripts/bench_llm_stages.py --model qwen2.5-coder-0.5b-instruct --tables 2
    .venv/bin/python scripts/bench_llm_stages.py --base-url http://host:8000/v1 --served-model NAME

1. **Raw rate**: the server alone, one request at a time, a prompt it already holds: completion tokens per
   second of the request's latency (median of ``--repeats``).
2. **Each stage through the pipeline**: the bundled sample files are ingested and profiled (offline, as the DAG
   tasks do), then synthesis, sampling and judging run with ``backend: llm`` on ``--tables`` tables through the
   stage functions the DAGs call, each with its own client (no response cache, so every call is paid and
   measured). A stage's rate is its completion tokens over its wall time: everything the stage does besides
   generating (prompt evaluation, sandboxed code, parsing, writing) shows as the gap to the raw rate.
3. **Prompt tokens sent vs evaluated**: the endpoint's ``usage.prompt_tokens_details.cached_tokens`` (the local
   llama.cpp launcher reports it; OpenAI, vLLM and others with prompt caching too) says how many prompt tokens
   its prefix cache answered; the rest it evaluated. On a paid endpoint the cached share is the billed discount.

Prints a table and writes it as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "include"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import plan, process  # noqa: E402  (ingest and profile as the DAG tasks run them)

from datamind.agent.params import RolloutParams  # noqa: E402
from datamind.judge.params import JudgeParams  # noqa: E402
from datamind.judge.stage import judge_shard, plan_judging  # noqa: E402
from datamind.llm import LLMClient, LLMConfig, local, models  # noqa: E402
from datamind.llm.serving import serve  # noqa: E402
from datamind.rollout.stage import plan_sampling, sample_shard  # noqa: E402
from datamind.storage import DataRoot  # noqa: E402
from datamind.synth.params import SynthParams  # noqa: E402
from datamind.synth.stage import plan_synthesis, synthesize_shard  # noqa: E402

RAW_PROMPT = "List the first forty prime numbers, one per line, each with a short note on how you checked it."


def raw_rate(base_url: str, model: str, repeats: int, max_tokens: int, api_key: str | None = None) -> dict:
    """Median completion tokens per second of one request at a time whose prompt the server already holds."""
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": RAW_PROMPT}],
            "max_tokens": max_tokens,
            "temperature": 0,
        }  # fmt: skip
    ).encode()
    rates, tokens = [], []
    for i in range(repeats + 1):
        req = urllib.request.Request(f"{base_url}/chat/completions", body, headers)
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=900) as resp:
            usage = json.load(resp)["usage"]
        latency = time.perf_counter() - t0
        if i:  # the first request evaluates the prompt; the ones after find it in the prefix cache
            rates.append(usage["completion_tokens"] / latency)
            tokens.append(usage["completion_tokens"])
    return {"tokens_per_s": statistics.median(rates), "completion_tokens": statistics.median(tokens), "runs": rates}


def _measure(name: str, config: LLMConfig, run) -> dict:
    client = LLMClient(config)  # no response cache: every call is paid, so every token is measured
    t0 = time.perf_counter()
    summaries = run(client)
    wall = time.perf_counter() - t0
    snap = client.usage.snapshot()
    request_s = sum(u["request_s"] for u in snap["by_model"].values())
    return {
        "stage": name,
        "wall_s": wall,
        "calls": snap["calls"],
        "completion_tokens": snap["completion_tokens"],
        "prompt_tokens_sent": snap["prompt_tokens"],
        "prompt_tokens_cached": snap["endpoint_cached_prompt_tokens"],
        "prompt_tokens_evaluated": snap["prompt_tokens"] - snap["endpoint_cached_prompt_tokens"],
        "request_s": request_s,
        "tokens_per_s": snap["completion_tokens"] / wall if wall else 0.0,
        "summaries": summaries,
    }


def pipeline(root: DataRoot, config: LLMConfig, args) -> list[dict]:
    for stage in ("ingest", "profile"):
        for spec in plan(stage, root, REPO / "samples" / "files"):
            process(stage, root, spec, f"bench-{stage}")
    synth = SynthParams.from_form(
        {"backend": "llm", "queries_per_category": 1, "n_chains": 0, "categories": [args.category]}
    )
    rollout = RolloutParams.from_form(
        {"backend": "llm", "n_samples": args.n_samples, "max_turns": args.max_turns, "max_tokens": args.max_tokens}
    )
    judge = JudgeParams.from_form({"judge_backend": "llm"})
    specs = plan_synthesis(root, args.tables, synth)[:1]  # one shard of --tables tables
    stages = [
        _measure("synthesis", config,
                 lambda c: [synthesize_shard(root, s, synth, "bench-synth", llm_client=c) for s in specs]),
        _measure("sampling", config,
                 lambda c: [sample_shard(root, s, rollout, "bench-rollout", llm_client=c)
                            for s in plan_sampling(root, None, rollout)]),
        _measure("judging", config,
                 lambda c: [judge_shard(root, s, judge, "bench-judge", llm_client=c)
                            for s in plan_judging(root, None, judge)]),
    ]  # fmt: skip
    return stages


def report(model: str, raw: dict, stages: list[dict]) -> None:
    print(f"\nmodel {model}; raw single-request generation: {raw['tokens_per_s']:.2f} tokens/s "
          f"(median of {len(raw['runs'])}, {raw['completion_tokens']:.0f} tokens each)\n")  # fmt: skip
    head = ("stage", "wall s", "calls", "gen tok", "tok/s", "x raw", "prompt sent", "evaluated", "cached share")
    print("{:<10} {:>8} {:>6} {:>8} {:>7} {:>6} {:>12} {:>10} {:>13}".format(*head))
    for s in stages:
        share = s["prompt_tokens_cached"] / s["prompt_tokens_sent"] if s["prompt_tokens_sent"] else 0.0
        print(f"{s['stage']:<10} {s['wall_s']:>8.0f} {s['calls']:>6} {s['completion_tokens']:>8} "
              f"{s['tokens_per_s']:>7.2f} {s['tokens_per_s'] / raw['tokens_per_s']:>6.2f} "
              f"{s['prompt_tokens_sent']:>12} {s['prompt_tokens_evaluated']:>10} {share:>13.0%}")  # fmt: skip
    print("\ntok/s: completion tokens over the stage's wall time; x raw: that over the raw rate (goal >= 0.8);")
    print("evaluated: prompt tokens the endpoint read (sent minus what its prefix cache answered).")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="a catalogue name served here (default: the teacher)")
    ap.add_argument("--base-url", help="measure this endpoint instead of serving a model here")
    ap.add_argument("--served-model", help="the model name the endpoint at --base-url serves")
    ap.add_argument("--threads", type=int, default=0, help="llama.cpp threads (0: the serving default)")
    ap.add_argument("--tables", type=int, default=3)
    ap.add_argument("--category", default="counting")
    ap.add_argument("--n-samples", type=int, default=3)
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=384)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--keep", help="keep the data root here")
    args = ap.parse_args()
    with ExitStack() as stack:
        if args.base_url:
            base_url, model = args.base_url.rstrip("/"), args.served_model or args.model
            extra = {"model": model, "max_concurrency": 1, "timeout_s": 900}
        else:
            model = args.model or models.with_role("teacher").name
            spec = local.default_spec(threads=args.threads, name=model)
            server = stack.enter_context(serve(spec))
            base_url = server.base_url
            extra = local.connection_extra(local.LocalEndpoint(base_url, model, spec.engine, 0))
        # a paid endpoint's key comes from the environment, as the Connection's fallback reads it
        key = os.environ.get("DATAMIND_LLM_API_KEY", "") if args.base_url else ""
        config = LLMConfig.from_connection_dict({"host": base_url, "password": key, "extra": extra})
        raw = raw_rate(base_url, model, args.repeats, 128, config.api_key)  # a paid endpoint wants its key
        root_dir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-llm-stages-"))
        try:
            stages = pipeline(DataRoot(str(root_dir)), config, args)
        finally:
            if not args.keep:
                shutil.rmtree(root_dir, ignore_errors=True)
    report(model, raw, stages)
    if args.json:
        Path(args.json).write_text(json.dumps({"model": model, "raw": raw, "stages": stages}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
