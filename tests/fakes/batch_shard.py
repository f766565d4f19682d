"""A stage in miniature for the batch-mode tests, importable by a child process (``python -m fakes.batch_shard``)."""

from __future__ import annotations

import json
import sys

from datamind.llm import LLMClient, LLMConfig, ResponseCache, run_all
from datamind.llm.config import Price
from datamind.storage import DataRoot

QUESTIONS = [f"question {i}" for i in range(4)]


def comparable_rows(root: DataRoot, tables) -> dict[str, list[str]]:
    """Each ``(rel_dir, schema)`` table's rows as sorted canonical JSON, without what differs from run to run
    (``run_id``, ``created_at``): an online and a batch run of the same inputs must give equal lists."""
    from datamind.shards import read_rows

    return {
        rel_dir: sorted(
            json.dumps({k: v for k, v in r.items() if k not in ("run_id", "created_at")}, sort_keys=True, default=str)
            for r in read_rows(root, schema, rel_dir)
        )
        for rel_dir, schema in tables
    }


def client_for(base_url: str, api_key: str, root: DataRoot) -> LLMClient:
    cfg = LLMConfig(
        base_url=base_url,
        api_key=api_key,
        models={"synthesizer": "fake-model"},
        max_retries=0,
        prices={"fake-model": Price(prompt=2.0, completion=8.0)},
    )
    return LLMClient(cfg, cache=ResponseCache(root))


def two_step_shard(questions: list[str]):
    """Each item asks once, then again with the first answer in the prompt (a chain's next hop), records its
    failure per item, and the shard writes one output file at the end."""

    def run(root, client) -> dict:
        async def item(q: str) -> str:
            first = await client.chat("synthesizer", [{"role": "user", "content": q}], template_version="t@1")
            follow = [{"role": "user", "content": f"{q} then {first.text}"}]
            return (await client.chat("synthesizer", follow, template_version="t@1")).text

        out = run_all([item(q) for q in questions], client=client)
        rows = [
            {"q": q, "a": a} if isinstance(a, str) else {"q": q, "error": a.reason_code}
            for q, a in zip(questions, out, strict=True)
        ]
        root.write_text("out/rows.json", json.dumps(rows))
        return {"rows": len(rows), "answered": sum("a" in r for r in rows)}

    return run


if __name__ == "__main__":
    from datamind.llm.batch import run_batched

    base_url, api_key, path = sys.argv[1:4]
    root = DataRoot(path)
    run_batched(two_step_shard(QUESTIONS), root, client_for(base_url, api_key, root), "shard-k", poll_s=0.05)
