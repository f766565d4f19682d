"""What a release's samples cost in LLM usage: tokens (and US dollars where a price is configured) per accepted
sample, by category x hop, and what the response cache answered for free.

A sample's usage is its question's synthesis calls plus every trajectory sampled for that question (the
rejected and the failed ones too: they are the price of the one kept), read from the ``queries`` and
``trajectories`` tables, whose rows carry the tokens of their calls and the part the cache answered. Judging
calls are not in any row yet, so the LLM judge's share is not counted.
The offline engine makes no calls: its releases cost nothing, and say so.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import pyarrow.parquet as pq

from datamind.assets import DIRS
from datamind.schemas import QUERIES, TRAJECTORIES
from datamind.shards import shard_paths
from datamind.storage import DataRoot

_FIELDS = ("prompt_tokens", "completion_tokens", "cached_prompt_tokens", "cached_completion_tokens")


def _usage(root: DataRoot, table, rel: str, wanted: set[str]) -> dict[str, list[dict]]:
    """The usage columns of ``table``'s rows for ``wanted`` queries; shards written before a column
    existed read it as zero."""
    by_query: dict[str, list[dict]] = defaultdict(list)
    for path in shard_paths(root, rel) if root.exists(rel) else []:
        with root.open(path) as fh:
            pf = pq.ParquetFile(fh)
            cols = [c for c in ("query_id", "model", *_FIELDS) if c in pf.schema_arrow.names]
            for r in pf.read(columns=cols).to_pylist():
                if r["query_id"] in wanted:
                    by_query[r["query_id"]].append(r)
    return by_query


def release_cost(root: DataRoot, samples: list[Mapping], prices: Mapping | None = None) -> dict:
    """``samples``: the release's rows (query_id, category, hop); ``prices``: model -> llm.config.Price."""
    prices = prices or {}
    wanted = {s["query_id"] for s in samples}
    calls = {"synthesis": _usage(root, QUERIES, DIRS["queries"], wanted),
             "sampling": _usage(root, TRAJECTORIES, DIRS["trajectories"], wanted)}  # fmt: skip
    cells: dict[str, dict] = {}
    total = _empty()
    priced = True
    for s in samples:
        key = f"{s['category']} / hop {s['hop']}"
        cell = cells.setdefault(key, _empty())
        cell["samples"] += 1
        total["samples"] += 1
        for rows in calls.values():
            for r in rows.get(s["query_id"], []):
                p, c, cp, cc = (int(r.get(f) or 0) for f in _FIELDS)
                price = prices.get(r.get("model") or "")
                if price is None and (p or c):
                    priced = False
                for target in (cell, total):
                    for f, n in zip(_FIELDS, (p, c, cp, cc), strict=True):
                        target[f] += n
                    if price is not None:
                        target["usd"] += price.cost(p - cp, c - cc)
                        target["saved_usd"] += price.cost(cp, cc)
    return {
        "priced": priced,  # False: some calls had no configured price, their dollars are not counted
        "total": _per_sample(total),
        "by_category_hop": {k: _per_sample(v) for k, v in sorted(cells.items())},
    }


def _empty() -> dict:
    return {"samples": 0, **{f: 0 for f in _FIELDS}, "usd": 0.0, "saved_usd": 0.0}


def _per_sample(c: dict) -> dict:
    n = c["samples"] or 1
    tokens = c["prompt_tokens"] + c["completion_tokens"]
    cached = c["cached_prompt_tokens"] + c["cached_completion_tokens"]
    return {
        **c,
        "usd": round(c["usd"], 6),
        "saved_usd": round(c["saved_usd"], 6),
        "paid_tokens_per_sample": round((tokens - cached) / n, 1),
        "cached_tokens_per_sample": round(cached / n, 1),
        "usd_per_sample": round(c["usd"] / n, 6),
    }
