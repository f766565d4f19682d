"""Persistent LLM response cache: a retry, rerun or backfill never pays for the same call twice.

One JSON file per response at ``cache/llm/<hh>/<hash>.json`` under the data root, where ``hash`` is the
SHA-256 of everything that decides the reply: model, messages, sampling parameters, prompt template
version and sample index.  Files are written with :meth:`DataRoot.write_bytes` (temporary sibling +
rename, or one PUT on object stores), so any number of concurrent writers - mapped task instances on
different workers - can race on the same key: the last complete write wins and readers never see a
partial file.  A corrupt or foreign file counts as a miss and is overwritten.
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from datamind.assets import DIRS
from datamind.storage import DataRoot

log = logging.getLogger(__name__)

CACHE_FORMAT = 1  # bump when the record layout changes; older records then read as misses


def cache_key(
    *,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any] | None,
    template_version: str,
    sample_index: int = 0,
) -> str:
    """Hex SHA-256 over a canonical JSON of the request.

    ``template_version`` is mandatory so that a prompt change can never be answered from an old cache entry.
    """
    if not isinstance(template_version, str) or not template_version.strip():
        raise ValueError("template_version is required for every LLM call (it keys the response cache)")
    if not model:
        raise ValueError("model is required to key the response cache")
    clean_params = {k: v for k, v in (params or {}).items() if v is not None}
    payload = {
        "format": CACHE_FORMAT,
        "model": model,
        "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        "params": clean_params,
        "template_version": template_version,
        "sample_index": int(sample_index),
    }
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ResponseCache:
    def __init__(self, root: DataRoot, rel_dir: str = DIRS["llm_cache"]) -> None:
        self.root = root
        self.rel_dir = rel_dir

    def rel_path(self, key: str) -> str:
        if len(key) < 8 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"not a cache key: {key!r}")
        return posixpath.join(self.rel_dir, key[:2], f"{key}.json")

    def get(self, key: str) -> dict[str, Any] | None:
        rel = self.rel_path(key)
        try:
            raw = self.root.read_bytes(rel)
        except FileNotFoundError:
            return None
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            log.warning("LLM cache entry %s is corrupt; treating it as a miss", rel)
            return None
        if not isinstance(record, dict) or record.get("key") != key or record.get("format") != CACHE_FORMAT:
            log.warning("LLM cache entry %s does not match its key or format; treating it as a miss", rel)
            return None
        return record

    def put(self, key: str, record: Mapping[str, Any]) -> str:
        body = {**record, "key": key, "format": CACHE_FORMAT}
        data = json.dumps(body, ensure_ascii=False, sort_keys=True).encode("utf-8")
        return self.root.write_bytes(self.rel_path(key), data)

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def count(self) -> int:
        return len(self.root.glob(self.rel_dir, "*", "*.json")) if self.root.exists(self.rel_dir) else 0
