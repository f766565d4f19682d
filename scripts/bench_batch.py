"""Online against batch mode for synthesis and judging on the loopback test server: requests, batches, tokens
and the price each mode pays, and whether the rows are the same.

    .venv/bin/python scripts/bench_batch.py [--prompt-price 0.15 --completion-price 0.60]

Synthesis runs the LLM backend over one small table (3 categories x 2 questions and a 3-hop chain, with the
replies tests/synth use: a malformed category, a program that never runs, a typo repaired when shown);
judging runs the model-as-judge with one reflection round over the offline-sampled test corpus. Each stage
runs once online and once in batch mode into its own data root; prices come from the price table given
(USD per million tokens, batch at half).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO / "tests", REPO / "tests" / "synth", REPO / "tests" / "rollout", REPO / "include"):
    sys.path.insert(0, str(p))

from fakes.batch_shard import comparable_rows  # noqa: E402
from fakes.openai_server import FakeOpenAIServer  # noqa: E402

from datamind.llm import LLMClient, LLMConfig, ResponseCache  # noqa: E402
from datamind.llm.batch import run_batched  # noqa: E402
from datamind.llm.config import Price  # noqa: E402
from datamind.storage import DataRoot  # noqa: E402


def compare(name, server, responder, prepare, run, tables, models, price) -> dict:
    def client(root):
        cfg = LLMConfig(base_url=server.base_url, api_key="sk-bench", models=models, max_retries=0,
                        prices={m: price for m in models.values()})  # fmt: skip
        return LLMClient(cfg, cache=ResponseCache(root))

    work = Path(tempfile.mkdtemp(prefix=f"bench-batch-{name}-"))
    online, batched = DataRoot(str(work / "online")), DataRoot(str(work / "batch"))
    spec = prepare(online)
    prepare(batched)
    server.reset()
    server.responder = responder
    c = client(online)
    run(online, spec, c)
    on = {"requests": server.request_count, "tokens": (c.usage.prompt_tokens, c.usage.completion_tokens)}
    on["usd"] = price.cost(*on["tokens"])
    server.reset()
    server.responder = responder
    summary = run_batched(lambda r, cl: run(r, spec, cl), batched, client(batched), "bench", poll_s=0.01)
    b = summary["batches"]
    tokens = (sum(x["prompt_tokens"] for x in b), sum(x["completion_tokens"] for x in b))
    return {
        "stage": name,
        "online_requests": on["requests"],
        "online_usd": on["usd"],
        "online_tokens": on["tokens"],
        "batch_requests": sum(x["requests"] for x in b),
        "batch_http_chat_calls": server.request_count,
        "batches": len(b),
        "batch_tokens": tokens,
        "batch_usd": sum(x.get("cost_usd") or 0 for x in b),
        "same_rows": comparable_rows(online, tables) == comparable_rows(batched, tables),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompt-price", type=float, default=0.15, help="USD per million prompt tokens")
    ap.add_argument("--completion-price", type=float, default=0.60, help="USD per million completion tokens")
    args = ap.parse_args()
    price = Price(args.prompt_price, args.completion_price)

    from rollout.corpus import build_corpus
    from synth_fixtures import SMALL_CSV, catalog_rows, write_catalog
    from test_rollout_llm_e2e import fake_models
    from test_synth_llm_path import PARAMS, responder

    from datamind.agent.params import RolloutParams
    from datamind.assets import DIRS
    from datamind.judge.params import JudgeParams
    from datamind.judge.stage import judge_shard, plan_judging
    from datamind.rollout.stage import plan_sampling, sample_shard
    from datamind.sandbox import Sandbox, SandboxLimits
    from datamind.schemas import DATASET, QUERIES, REJECTIONS
    from datamind.synth.stage import plan_synthesis, synthesize_shard

    csv = Path(tempfile.mkdtemp(prefix="bench-batch-csv-")) / "sales.csv"
    csv.write_text(SMALL_CSV)

    def synth_prepare(root):
        write_catalog(root, catalog_rows(csv))
        return plan_synthesis(root, 10, PARAMS)[0]

    judge_params = JudgeParams(judge_backend="llm", reflection_rounds=1)
    results = []
    with FakeOpenAIServer() as server, Sandbox(SandboxLimits(wall_s=20.0, cpu_s=20)) as sandbox:
        results.append(compare(
            "synthesis", server, responder, synth_prepare,
            lambda r, spec, c: synthesize_shard(r, spec, PARAMS, "bench", llm_client=c),
            (("queries", QUERIES), ("rejections", REJECTIONS)), {"synthesizer": "synth-model"}, price,
        ))  # fmt: skip

        def judge_prepare(root):
            build_corpus(root, str(Path(root.root).parent))
            for spec in plan_sampling(root, 10, RolloutParams()):
                sample_shard(root, spec, RolloutParams(), "bench", sandbox=sandbox)
            return plan_judging(root, 10, judge_params)[0]

        results.append(compare(
            "judging", server, fake_models, judge_prepare,
            lambda r, spec, c: judge_shard(r, spec, judge_params, "bench", llm_client=c, sandbox=sandbox),
            ((DIRS["judged"], DATASET), ("rejections/judge", REJECTIONS)), {"judge": "judge-model"}, price,
        ))  # fmt: skip

    print(f"price table: prompt ${price.prompt}/Mtok, completion ${price.completion}/Mtok, batch x{price.batch}")
    print(f"{'stage':<10} {'mode':<7} {'requests':>8} {'chat calls':>10} {'batches':>7} {'tokens in/out':>14} "
          f"{'USD':>10} {'same rows':>9}")  # fmt: skip
    for r in results:
        print(f"{r['stage']:<10} {'online':<7} {r['online_requests']:>8} {r['online_requests']:>10} {'-':>7} "
              f"{'/'.join(map(str, r['online_tokens'])):>14} {r['online_usd']:>10.6f} {'':>9}")  # fmt: skip
        print(f"{'':<10} {'batch':<7} {r['batch_requests']:>8} {r['batch_http_chat_calls']:>10} {r['batches']:>7} "
              f"{'/'.join(map(str, r['batch_tokens'])):>14} {r['batch_usd']:>10.6f} {r['same_rows']!s:>9}")  # fmt: skip
    return 0 if all(r["same_rows"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
