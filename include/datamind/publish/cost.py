"""What a release's samples cost in LLM usage: tokens (and US dollars where a price is configured) per accepted
sample, by category x hop, and what the response cache answered for free.

A sample's usage is its question's synthesis calls plus every trajectory sampled for that question (the
rejected and the failed ones too: they are the price of the one kept), read from the ``queries`` and
``trajectories`` tables, whose rows carry the tokens of their calls and the part the cache answered. Judging
calls are not in any row yet, so the LLM judge's share is not counted.
The offline engine makes no calls: its releases cost nothing, and say so.

Usage is summed in Arrow, per query and model within each shard, then per cell and model: memory holds one row
per query and model, never a Python object per trajectory (a release of 300,000 samples has ~900,000).
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datamind.assets import DIRS
from datamind.shards import column_counts, parquet_source, shard_paths
from datamind.storage import DataRoot

_FIELDS = ("prompt_tokens", "completion_tokens", "cached_prompt_tokens", "cached_completion_tokens")
_KEYS = ["query_id", "model"]
_USAGE = pa.schema([("query_id", pa.string()), ("model", pa.string()), *((f, pa.int64()) for f in _FIELDS)])
_MERGE_ROWS = 200_000  # usage rows read before the sums so far are merged


def _summed(table: pa.Table, keys: list[str]) -> pa.Table:
    """``table``'s token columns summed per ``keys`` (a sum over nothing but nulls is 0)."""
    out = table.group_by(keys, use_threads=False).aggregate([(f, "sum") for f in _FIELDS])
    return pa.table({**{k: out[k] for k in keys}, **{f: pc.fill_null(out[f"{f}_sum"], 0) for f in _FIELDS}})


def _usage(root: DataRoot, rel: str) -> pa.Table:
    """The token columns of ``rel``'s rows summed per query and model; shards written before a column existed
    read it as zero. Shards are summed as they are read, and the sums merged now and then, so memory holds
    about one row per query and model (the release's samples pick theirs in a join)."""
    merged, pending, pending_rows = _USAGE.empty_table(), [], 0
    for path in shard_paths(root, rel) if root.exists(rel) else []:
        with parquet_source(root, path) as source:
            pf = pq.ParquetFile(source)
            names = pf.schema_arrow.names
            t = pf.read(columns=[c for c in ("query_id", "model", *_FIELDS) if c in names])
        if "model" not in names:
            t = t.append_column("model", pa.nulls(len(t), pa.string()))
        for f in _FIELDS:
            t = t.append_column(f, pa.nulls(len(t), pa.int64())) if f not in names else t
        pending.append(t.select([*_KEYS, *_FIELDS]).cast(_USAGE))
        pending_rows += len(t)
        if pending_rows > max(_MERGE_ROWS, len(merged)):  # amortised: merged at most doubles
            merged, pending, pending_rows = _summed(pa.concat_tables([merged, *pending]), _KEYS), [], 0
    return _summed(pa.concat_tables([merged, *pending]), _KEYS)


def release_cost(root: DataRoot, samples: pa.Table, prices: Mapping | None = None) -> dict:
    """``samples``: the release's rows (columns query_id, category, hop); ``prices``: model -> llm.config.Price."""
    prices = prices or {}
    cell = pc.binary_join_element_wise(samples["category"], pc.cast(samples["hop"], pa.string()), " / hop ")
    per_sample = pa.table({"query_id": samples["query_id"], "cell": cell})
    usage = pa.concat_tables([_usage(root, DIRS["queries"]), _usage(root, DIRS["trajectories"])])
    # a sample counts its query's calls (two samples of one query both do, as each is paid for by them)
    by_cell = _summed(per_sample.join(usage, "query_id", join_type="inner", use_threads=False), ["cell", "model"])
    cells: dict[str, dict] = {key: {**_empty(), "samples": n} for key, n in column_counts(per_sample, "cell").items()}
    total = {**_empty(), "samples": samples.num_rows}
    priced = True
    for row in by_cell.to_pylist():  # one row per cell and model
        p, c, cp, cc = (row[f] or 0 for f in _FIELDS)
        price = prices.get(row["model"] or "")
        if price is None and (p or c):
            priced = False
        for target in (cells[row["cell"]], total):
            for f, n in zip(_FIELDS, (p, c, cp, cc), strict=True):
                target[f] += n
            if price is not None:  # a price is linear in tokens: the sum's cost is the sum of the costs
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
