"""Retries, capped streaming downloads and safe unzipping for the Kaggle crawler.

Kept apart from the crawl loop so each piece can be reasoned about (and tested) on its own; nothing
here imports ``kaggle``: errors are classified by the ``requests`` exceptions the kagglesdk client raises.
"""

from __future__ import annotations

import email.utils
import logging
import os
import posixpath
import random
import time
import uuid
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import requests

log = logging.getLogger("datamind.ingest.kaggle")

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_CHUNK = 1 << 16


class CallFailed(Exception):
    """An API call that did not succeed; ``attempts`` were made, ``status`` is the last HTTP status if any."""

    def __init__(self, reason: str, attempts: int, status: int | None = None):
        super().__init__(reason)
        self.reason = reason
        self.attempts = attempts
        self.status = status


class TooLarge(Exception):
    """The bytes on the wire went past a cap (the listing under-reported the size, or a zip bomb)."""


class UnsafeArchive(Exception):
    """A zip member that would escape its folder, or an archive that is not what it claims to be."""


class _Truncated(requests.exceptions.ConnectionError):
    """Body shorter than its Content-Length: treated like a dropped connection, so it is retried."""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    base_s: float = 1.0
    max_s: float = 60.0
    sleep: Callable[[float], None] = time.sleep
    rand: Callable[[], float] = random.random

    def backoff(self, attempt: int) -> float:
        """Equal-jitter exponential backoff for retry number ``attempt`` (1-based): half fixed, half random,
        so concurrent crawlers spread out but none retries instantly."""
        ceiling = min(self.max_s, self.base_s * (2 ** (attempt - 1)))
        return ceiling / 2 + self.rand() * ceiling / 2


def retry_after_seconds(response) -> float | None:
    """Seconds asked for by a Retry-After header (delta seconds or an HTTP date), None if absent/garbled."""
    if response is None:
        return None
    raw = response.headers.get("Retry-After")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _classify(exc: BaseException) -> tuple[bool, int | None, object]:
    """(retryable, http status, response) for an exception raised by the kagglesdk client or our reads."""
    if isinstance(exc, requests.exceptions.HTTPError):
        response = exc.response
        status = response.status_code if response is not None else None
        return (status in RETRYABLE_STATUS, status, response)
    if isinstance(
        exc,
        (requests.exceptions.ConnectionError, requests.exceptions.Timeout, requests.exceptions.ChunkedEncodingError),
    ):
        return (True, None, None)
    return (False, None, None)


def describe(exc: BaseException) -> str:
    """Short reason for the failure record: the status and message, never headers or bodies."""
    _, status, _ = _classify(exc)
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    prefix = f"HTTP {status}: " if status else f"{type(exc).__name__}: "
    return (prefix + text)[:300]


def call_with_retries(
    fn: Callable[[], T], policy: RetryPolicy, what: str, redact: Callable[[str], str] = lambda s: s
) -> tuple[T, int]:
    """Run ``fn`` until it succeeds or ``policy.attempts`` are spent; returns (result, attempts used).

    429, 408 and 5xx responses and connection errors are retried, honouring Retry-After (capped at
    ``policy.max_s`` so one answer cannot stall a task for hours); anything else fails at once.
    Raises ``CallFailed`` carrying the attempts made and the last reason.
    """
    for attempt in range(1, policy.attempts + 1):
        try:
            return fn(), attempt
        except (TooLarge, UnsafeArchive):
            raise
        except Exception as exc:  # noqa: BLE001 - classified below, re-raised as CallFailed
            retryable, status, response = _classify(exc)
            reason = redact(describe(exc))
            if not retryable or attempt == policy.attempts:
                raise CallFailed(reason, attempt, status) from None
            wait = retry_after_seconds(response)
            wait = policy.backoff(attempt) if wait is None else min(wait, policy.max_s)
            log.warning("%s failed (%s); retry %d/%d in %.2fs", what, reason, attempt, policy.attempts - 1, wait)
            policy.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover


def stream_to_file(response, path: str, max_bytes: int) -> int:
    """Write a streamed ``requests`` response to ``path`` atomically, stopping past ``max_bytes``.

    Returns the byte count. A body shorter than its Content-Length raises a retryable error; a body
    over the cap raises ``TooLarge``. Either way no partial file is left behind.
    """
    declared = response.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise TooLarge(f"server announced {declared} bytes, over the cap of {max_bytes}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{uuid.uuid4().hex}.part")
    written = 0
    try:
        with open(tmp, "wb") as out:
            for chunk in response.iter_content(_CHUNK):
                if not chunk:
                    continue
                written += len(chunk)
                if written > max_bytes:
                    raise TooLarge(f"download passed the cap of {max_bytes} bytes")
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if declared and declared.isdigit() and written != int(declared):
            raise _Truncated(f"received {written} of {declared} bytes")
        os.replace(tmp, path)
        return written
    finally:
        response.close()
        if os.path.exists(tmp):
            os.remove(tmp)


def safe_member_path(name: str) -> str | None:
    """Normalised relative path for an archive member or a Kaggle file name; None when it is absolute,
    climbs out with '..', or is empty (the zip-slip guard)."""
    name = name.replace("\\", "/")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts) or any("\x00" in p for p in parts):
        return None
    return posixpath.join(*parts)


def is_zip(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"PK\x03\x04"


def unwrap_single_file(archive: str, wanted: str, dest: str, max_bytes: int) -> int:
    """Kaggle may serve one requested file inside a zip. Extract the member for ``wanted`` into ``dest``.

    Every member name is checked (an archive carrying a path-escaping member is refused as a whole,
    since its producer cannot be trusted), and the copy is counted against ``max_bytes`` as it
    decompresses rather than trusting the header's size (zip-bomb guard). Returns the bytes written.
    """
    base = posixpath.basename(wanted)
    try:
        zf = zipfile.ZipFile(archive)
    except zipfile.BadZipFile as exc:
        raise UnsafeArchive(f"not a valid zip: {exc}") from None
    with zf:
        members = [m for m in zf.infolist() if not m.is_dir()]
        for m in members:
            if safe_member_path(m.filename) is None:
                raise UnsafeArchive(f"archive member {m.filename!r} escapes its folder")
        match = [m for m in members if safe_member_path(m.filename) in (safe_member_path(wanted), base)]
        if not match and len(members) == 1:
            match = members
        if len(match) != 1:
            raise UnsafeArchive(f"archive does not hold exactly one {base!r} ({len(members)} members)")
        member = match[0]
        if member.file_size > max_bytes:
            raise TooLarge(f"{base} unpacks to {member.file_size} bytes, over the cap of {max_bytes}")
        tmp = os.path.join(os.path.dirname(dest), f".{os.path.basename(dest)}.{uuid.uuid4().hex}.part")
        written = 0
        try:
            with zf.open(member) as src, open(tmp, "wb") as out:
                while chunk := src.read(_CHUNK):
                    written += len(chunk)
                    if written > max_bytes:
                        raise TooLarge(f"{base} unpacks past the cap of {max_bytes} bytes")
                    out.write(chunk)
            os.replace(tmp, dest)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return written


def remove_tree_if_empty(path: str, stop: str) -> None:
    """Remove empty folders from ``path`` up to (not including) ``stop``."""
    path, stop = os.path.abspath(path), os.path.abspath(stop)
    while path.startswith(stop + os.sep) and os.path.isdir(path) and not os.listdir(path):
        os.rmdir(path)
        path = os.path.dirname(path)


def discard(paths: list[str], root: str) -> None:
    for p in paths:
        if os.path.isfile(p):
            os.remove(p)
        remove_tree_if_empty(os.path.dirname(p), root)


__all__ = [
    "CallFailed",
    "RetryPolicy",
    "TooLarge",
    "UnsafeArchive",
    "call_with_retries",
    "discard",
    "is_zip",
    "retry_after_seconds",
    "safe_member_path",
    "stream_to_file",
    "unwrap_single_file",
]
