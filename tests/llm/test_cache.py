"""The response cache: what keys it, where it lives, and that concurrent writers cannot corrupt it."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os

import pytest

from datamind.llm import ResponseCache, cache_key
from datamind.storage import DataRoot

MSGS = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"}]


def key(**overrides):
    args = dict(model="m", messages=MSGS, params={"temperature": 0.0}, template_version="v1", sample_index=0)
    args.update(overrides)
    return cache_key(**args)


def test_key_covers_every_input_that_changes_the_reply():
    base = key()
    assert len(base) == 64 and all(c in "0123456789abcdef" for c in base)
    variants = [
        key(model="m2"),
        key(messages=[*MSGS[:1], {"role": "user", "content": "2+3?"}]),
        key(messages=[{"role": "user", "content": "You are terse."}, MSGS[1]]),
        key(params={"temperature": 0.5}),
        key(params={"temperature": 0.0, "max_tokens": 10}),
        key(template_version="v2"),
        key(sample_index=1),
    ]
    assert base not in variants
    assert len(set(variants)) == len(variants)


def test_key_ignores_param_order_and_unset_params():
    a = key(params={"temperature": 0.0, "top_p": 1.0})
    b = key(params={"top_p": 1.0, "temperature": 0.0, "seed": None})
    assert a == b


@pytest.mark.parametrize("bad", ["", "   ", None])
def test_key_refuses_a_missing_template_version(bad):
    with pytest.raises(ValueError, match="template_version is required"):
        key(template_version=bad)


def test_put_get_layout_and_roundtrip(root: DataRoot):
    cache = ResponseCache(root)
    k = key()
    assert cache.get(k) is None and k not in cache
    cache.put(k, {"text": "4", "model": "m"})
    # laid out as cache/llm/<first two hex chars>/<key>.json under the data root
    path = os.path.join(root.root, "cache", "llm", k[:2], f"{k}.json")
    assert os.path.isfile(path)
    with open(path, encoding="utf-8") as fh:
        assert json.load(fh)["text"] == "4"
    assert cache.get(k)["text"] == "4" and cache.count() == 1


def test_corrupt_or_foreign_entries_read_as_misses(root: DataRoot):
    cache = ResponseCache(root)
    k1, k2 = key(), key(sample_index=7)
    root.write_bytes(cache.rel_path(k1), b'{"text": "trunc')
    root.write_text(cache.rel_path(k2), json.dumps({"key": k1, "format": 1, "text": "wrong key"}))
    assert cache.get(k1) is None and cache.get(k2) is None
    cache.put(k1, {"text": "fixed", "model": "m"})
    assert cache.get(k1)["text"] == "fixed"


def test_rejects_paths_that_are_not_keys(root: DataRoot):
    with pytest.raises(ValueError):
        ResponseCache(root).rel_path("../../etc/passwd")


def _hammer(root_url: str, k: str, writer: int, n: int) -> None:
    cache = ResponseCache(DataRoot(root_url))
    payload = "x" * 50_000  # big enough that a torn write would be visible
    for i in range(n):
        cache.put(k, {"text": f"{writer}:{i}:{payload}", "model": "m"})
        got = cache.get(k)  # a reader racing the writers must always see a whole record
        assert got is not None and got["text"].endswith(payload)


def test_concurrent_writer_processes_never_leave_a_torn_file(root: DataRoot):
    k = key()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_hammer, args=(root.url, k, w, 25)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    record = ResponseCache(root).get(k)
    writer, i, payload = record["text"].split(":")
    assert 0 <= int(writer) < 4 and i == "24" and payload == "x" * 50_000
    leftovers = [f for _, _, files in os.walk(root.root) for f in files if f.startswith(".")]
    assert leftovers == []


def test_key_is_sha256_of_canonical_request():
    # independent recomputation of the documented canonical form
    payload = {
        "format": 1,
        "model": "m",
        "messages": MSGS,
        "params": {"temperature": 0.0},
        "template_version": "v1",
        "sample_index": 0,
    }
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert key() == hashlib.sha256(canonical.encode()).hexdigest()
