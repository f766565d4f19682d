"""``python -m datamind.evaluate <data root> --suites '{"heldout": ""}' [--agent-conn-id ID] [...]``

The same evaluation as the evaluate_agent DAG, from a shell. Endpoints come from the environment
(``AIRFLOW_CONN_<ID>`` JSON or ``DATAMIND_LLM_*``), never from the command line.
"""

from __future__ import annotations

import argparse
import json
import sys

from datamind.evaluate.params import EvalParams


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m datamind.evaluate", description=__doc__.split("\n\n")[1])
    ap.add_argument("root", help="data root (results go to <root>/eval/<eval_id>/)")
    ap.add_argument("--suites", required=True, help='JSON object, e.g. {"dabench": "/data/dabench"}')
    for name in ("agent_conn_id", "model", "judge_conn_id"):
        ap.add_argument("--" + name.replace("_", "-"), default=None)
    for name, typ in (("trials", int), ("temperature", float), ("top_p", float), ("max_turns", int), ("limit", int)):
        ap.add_argument("--" + name.replace("_", "-"), type=typ, default=None)
    args = ap.parse_args(argv)
    raw = {k: v for k, v in vars(args).items() if k not in ("root", "suites") and v is not None}
    p = EvalParams.from_form({**raw, "suites": json.loads(args.suites)})

    from datamind.evaluate.stage import evaluate
    from datamind.llm import LLMClient, LLMConfig, ResponseCache
    from datamind.storage import DataRoot

    root = DataRoot(args.root)

    def client(conn_id: str, models: dict | None = None):
        config = LLMConfig.from_env(conn_id)
        if models:
            config = config.with_overrides(models={**config.models, **models})
        return LLMClient(config, cache=ResponseCache(root))

    agent = None if p.offline else client(p.agent_conn_id, {"agent": p.model} if p.model else None)
    judge = client(p.judge_conn_id) if p.judge_conn_id else None
    summary = evaluate(root, p, agent, judge)
    print(json.dumps({"eval_id": summary["eval_id"], "suites": summary["suites"]}, indent=2))
    print(f"report: {root.path('eval', summary['eval_id'], 'report.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
