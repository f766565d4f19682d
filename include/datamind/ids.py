"""Deterministic identifiers: the same input always gets the same id, on every machine and rerun."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any


def _canonical(part: Any) -> bytes:
    if isinstance(part, bytes):
        return part
    if isinstance(part, str):
        return part.encode("utf-8")
    # JSON with sorted keys makes dicts and lists hash the same regardless of construction order.
    return json.dumps(part, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":")).encode("utf-8")


def stable_id(*parts: Any, length: int = 16) -> str:
    """Hex id of ``parts``; length-prefixing each part keeps ("ab", "c") and ("a", "bc") apart."""
    h = hashlib.sha256()
    for part in parts:
        data = _canonical(part)
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()[:length]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(fileobj, chunk_size: int = 1 << 20) -> str:
    h = hashlib.sha256()
    while True:
        chunk = fileobj.read(chunk_size)
        if not chunk:
            break
        h.update(chunk)
    return h.hexdigest()


def safe_run_id(raw: str) -> str:
    """An Airflow run id as the tables record it: safe in file names (':' and '+' become '_'). Applying it
    to an id already made safe changes nothing, so a link may carry either form."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(raw))
