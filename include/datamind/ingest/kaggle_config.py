"""What the Kaggle crawler searches for, and with whose credentials.

Both records are plain data so the DAG can build them from JSON params and an Airflow Connection
without this package importing Airflow or ``kaggle``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from datamind.stage_params import StageParams, check_ranges, param

# Sort orders the Kaggle dataset search accepts (kagglesdk ``DatasetSortBy`` members, lower camel case).
SORT_ORDERS = ("hottest", "votes", "updated", "active", "published", "relevance", "usability", "downloadCount")
FILE_TYPES = ("csv", "xlsx")

# Canonical license ids; Kaggle reports free-text names ("CC0: Public Domain",
# "Attribution 4.0 International (CC BY 4.0)", ...) which ``license_id`` maps onto these.
LICENSE_IDS = (
    "cc0",
    "cc-by",
    "cc-by-sa",
    "cc-by-nc",
    "cc-by-nc-sa",
    "cc-by-nd",
    "cc-by-nc-nd",
    "pddl",
    "odc-by",
    "odbl",
    "mit",
    "apache-2.0",
    "bsd",
    "gpl",
    "lgpl",
    "agpl",
    "world-bank",
    "other",
    "unknown",
)
DEFAULT_LICENSES = ("cc0", "cc-by", "cc-by-sa", "pddl", "odc-by", "odbl", "mit", "apache-2.0")
# What the weekly crawl searches for unless its form says otherwise.
DEFAULT_QUERIES = ("sales", "weather", "healthcare", "finance", "education")
CRAWL_WINDOWS = ("auto", "interval", "none")


def license_id(name: str | None) -> str:
    """Map a Kaggle license name to a canonical id ('unknown' when empty or unrecognised)."""
    if not name or not name.strip():
        return "unknown"
    n = name.lower()
    if "cc0" in n or re.search(r"\bcc[\s-]?zero\b", n):
        return "cc0"
    if "pddl" in n or ("public domain" in n and "odc" in n):
        return "pddl"
    if "odbl" in n or "open database" in n:
        return "odbl"
    if "odc-by" in n or "odc attribution" in n or "odc-attribution" in n:
        return "odc-by"
    if "public domain" in n:
        return "cc0"
    cc = re.search(r"\bcc[\s-]+(by(?:[\s-]+(?:nc|sa|nd))*)", n)
    if cc:
        parts = re.split(r"[\s-]+", cc.group(1))
        return "cc-" + "-".join(parts)
    if "creative commons" in n or "attribution" in n:
        tags = ["by"] + [
            t
            for t in ("nc", "sa", "nd")
            if re.search(
                {
                    "nc": r"noncommercial|non-commercial",
                    "sa": r"sharealike|share-alike|share alike",
                    "nd": r"noderivatives|no derivatives|noderivs",
                }[t],
                n,
            )
        ]
        return "cc-" + "-".join(tags)
    if re.search(r"\bagpl\b", n):
        return "agpl"
    if re.search(r"\blgpl\b", n):
        return "lgpl"
    if re.search(r"\bgpl\b", n) or "gnu general public" in n:
        return "gpl"
    if re.search(r"\bmit\b", n):
        return "mit"
    if "apache" in n:
        return "apache-2.0"
    if re.search(r"\bbsd\b", n):
        return "bsd"
    if "world bank" in n:
        return "world-bank"
    if "unknown" in n:
        return "unknown"
    return "other"


def _as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _iso_utc(name: str, value: Any) -> str | None:
    """A window bound as a comparable UTC ISO string (``2026-01-05T00:00:00+00:00``)."""
    if value in (None, ""):
        return None
    try:
        parsed = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"KaggleCrawlConfig.{name} must be an ISO 8601 date-time, got {value!r}") from exc
    return _as_utc(parsed).isoformat()


def crawl_window(mode: str, run_type: str, start: datetime | None, end: datetime | None) -> dict[str, str | None]:
    """The window a crawl run covers, as KaggleCrawlConfig fields.

    ``mode`` 'auto' windows scheduled and backfill runs by their data interval and leaves manual runs
    unwindowed (a person asking for a crawl wants what is there now); 'interval' always windows (an error
    without an interval); 'none' never does."""
    if mode not in CRAWL_WINDOWS:
        raise ValueError(f"crawl window must be one of {CRAWL_WINDOWS}, got {mode!r}")
    wanted = mode == "interval" or (mode == "auto" and run_type in ("scheduled", "backfill"))
    if not wanted:
        return {"updated_since": None, "updated_before": None}
    if start is None or end is None or start >= end:
        raise ValueError(f"this run has no data interval to crawl ({start} to {end}); use crawl window 'none'")
    return {"updated_since": _iso_utc("updated_since", start), "updated_before": _iso_utc("updated_before", end)}


@dataclass(frozen=True)
class KaggleCrawlConfig(StageParams):
    """One crawl's search and limits. ``licenses`` is an allow-list of canonical ids (see ``LICENSE_IDS``)
    or exact Kaggle license names; a dataset whose license is not on it is skipped, never downloaded.
    The form fields are ingest_kaggle's trigger form; the rest are set from Python."""

    queries: tuple[str, ...] = param(
        DEFAULT_QUERIES,
        "Search queries",
        description="One Kaggle dataset search per entry.",
        min_items=1,
        min_length=1,
    )
    licenses: tuple[str, ...] = param(DEFAULT_LICENSES, "Allowed licenses", min_items=1, min_length=1)
    file_types: tuple[str, ...] = param(FILE_TYPES, "File types", enum=FILE_TYPES, min_items=1)
    # Datasets downloaded (or attempted) per query; skipped ones do not count, pages bound the walk.
    max_datasets_per_query: int = param(20, "Datasets per query", minimum=1, maximum=500)
    max_pages: int = param(5, "Result pages per query", minimum=1, maximum=100)
    max_dataset_bytes: int = param(200 * 1024 * 1024, "Max dataset size (bytes)", minimum=1, section="Limits")
    max_file_bytes: int = param(64 * 1024 * 1024, "Max file size (bytes)", minimum=1, section="Limits")
    page_size: int = param(20, "Results per page", minimum=1, form=False)
    max_files_per_dataset: int = param(20, "Files per dataset", minimum=1, form=False)
    sort_by: str = param("votes", "Sort order", enum=SORT_ORDERS, form=False)
    # A crawl window (ISO 8601, UTC when no offset): only datasets last updated in [updated_since, updated_before)
    # are taken, so each interval of a scheduled crawl or a backfill fetches its own week. A window searches
    # newest-updated first (whatever sort_by says) so the walk can stop once it is past the window's start;
    # pages entirely newer than the window do not count against max_pages, up to max_skip_pages of them.
    updated_since: str | None = None
    updated_before: str | None = None
    max_skip_pages: int = param(100, "Pages newer than the window", minimum=1, form=False)
    retries: int = param(4, "Attempts per API call", minimum=1, form=False)  # the first included
    backoff_base_s: float = param(1.0, "Backoff base (s)", minimum=0, form=False)
    backoff_max_s: float = param(60.0, "Backoff cap (s)", minimum=0, form=False)
    request_timeout_s: float = param(120.0, "Request timeout (s)", minimum=0.001, form=False)

    def __post_init__(self) -> None:
        for name in ("queries", "licenses", "file_types"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = (value,)
            object.__setattr__(self, name, tuple(str(v).strip() for v in value if str(v).strip()))
        object.__setattr__(self, "file_types", tuple(t.lower().lstrip(".") for t in self.file_types))
        for f in fields(self):
            if f.type in ("int", "float"):  # JSON and environment values arrive as text too
                value = getattr(self, f.name)
                try:
                    object.__setattr__(self, f.name, (int if f.type == "int" else float)(value))
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"KaggleCrawlConfig.{f.name} must be a number, got {value!r}") from exc
        check_ranges(self)
        for name in ("updated_since", "updated_before"):
            object.__setattr__(self, name, _iso_utc(name, getattr(self, name)))
        if self.updated_since and self.updated_before and self.updated_since >= self.updated_before:
            raise ValueError(
                f"KaggleCrawlConfig window is empty: updated_since {self.updated_since} "
                f"is not before updated_before {self.updated_before}"
            )
        if self.windowed:
            object.__setattr__(self, "sort_by", "updated")

    @classmethod
    def normalize(cls, raw: dict[str, Any]) -> dict[str, Any]:
        """A setting the form left empty takes its default."""
        return {k: v for k, v in raw.items() if v is not None}

    def to_dict(self) -> dict[str, Any]:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in fields(self)}

    @property
    def windowed(self) -> bool:
        return bool(self.updated_since or self.updated_before)

    def in_window(self, updated: datetime | None) -> str:
        """'in', 'newer' or 'older' for a dataset last updated at ``updated`` (unknown times count as in)."""
        if updated is None:
            return "in"
        when = _as_utc(updated).isoformat()
        if self.updated_before and when >= self.updated_before:
            return "newer"
        if self.updated_since and when < self.updated_since:
            return "older"
        return "in"

    def allows_license(self, name: str | None) -> bool:
        allowed = {a.lower() for a in self.licenses}
        return license_id(name) in allowed or (name or "").strip().lower() in allowed


_MASK = "***"


@dataclass(frozen=True)
class KaggleCredentials:
    """Kaggle credentials: a legacy username + API key, or an API token. Never logged, repr'd or written
    anywhere by this package: ``repr``/``str`` mask the values and the crawler hands them to the client
    in memory (no kaggle.json)."""

    username: str | None = field(default=None, repr=False)
    key: str | None = field(default=None, repr=False)
    api_token: str | None = field(default=None, repr=False)
    source: str = "explicit"

    def __post_init__(self) -> None:
        for name in ("username", "key", "api_token"):
            value = getattr(self, name)
            object.__setattr__(self, name, value.strip() if isinstance(value, str) and value.strip() else None)
        if not self.api_token and bool(self.username) != bool(self.key):
            raise ValueError("Kaggle credentials need both a username and a key (or an API token)")

    def __repr__(self) -> str:
        kind = "api_token" if self.api_token else ("username/key" if self.key else "none")
        user = self.username if self.username else None
        return f"KaggleCredentials(kind={kind}, username={user!r}, secret={_MASK}, source={self.source!r})"

    __str__ = __repr__

    def __reduce__(self):
        # Pickling (XCom, multiprocessing) would copy the secret out of this process's control.
        raise TypeError("KaggleCredentials cannot be pickled; build them inside the task that crawls")

    @property
    def present(self) -> bool:
        return bool(self.api_token or (self.username and self.key))

    def secrets(self) -> list[str]:
        return [s for s in (self.key, self.api_token) if s]

    def redact(self, text: str) -> str:
        for secret in self.secrets():
            text = text.replace(secret, _MASK)
        return text

    @classmethod
    def from_connection(
        cls, login: str | None, password: str | None, extra: Mapping[str, Any] | str | None = None
    ) -> KaggleCredentials:
        """From an Airflow Connection's fields: login = username, password = key; an API token may sit
        in ``extra["api_token"]`` (or in password with an empty login)."""
        if isinstance(extra, str):
            extra = json.loads(extra) if extra.strip() else {}
        token = (extra or {}).get("api_token") or (extra or {}).get("token")
        if not token and password and not login:
            token = password
            password = None
        return cls(username=login, key=password if login else None, api_token=token, source="connection")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, home: str | None = None) -> KaggleCredentials:
        """The standard Kaggle places, in the client's own order: KAGGLE_API_TOKEN (value or file path),
        ~/.kaggle/access_token, KAGGLE_USERNAME + KAGGLE_KEY, then kaggle.json (KAGGLE_CONFIG_DIR or ~/.kaggle)."""
        env = os.environ if environ is None else environ
        home_dir = Path(home or env.get("HOME") or os.path.expanduser("~"))
        token = env.get("KAGGLE_API_TOKEN")
        if token and len(token) < 4096 and Path(token).is_file():
            token = Path(token).read_text().strip()
        if token:
            return cls(api_token=token, source="env:KAGGLE_API_TOKEN")
        for candidate in (home_dir / ".kaggle" / "access_token", home_dir / ".kaggle" / "access_token.txt"):
            if candidate.is_file() and candidate.read_text().strip():
                return cls(api_token=candidate.read_text().strip(), source="file:access_token")
        if env.get("KAGGLE_USERNAME") and env.get("KAGGLE_KEY"):
            return cls(username=env["KAGGLE_USERNAME"], key=env["KAGGLE_KEY"], source="env:KAGGLE_USERNAME")
        config_dirs = [Path(env["KAGGLE_CONFIG_DIR"])] if env.get("KAGGLE_CONFIG_DIR") else []
        config_dirs += [home_dir / ".kaggle", Path(env.get("XDG_CONFIG_HOME") or home_dir / ".config") / "kaggle"]
        for config_dir in config_dirs:
            path = config_dir / "kaggle.json"
            if path.is_file():
                try:
                    data = json.loads(path.read_text() or "{}")
                except json.JSONDecodeError:
                    raise ValueError(f"{path} is not valid JSON") from None
                if data.get("username") and data.get("key"):
                    return cls(username=data["username"], key=data["key"], source="file:kaggle.json")
        return cls(source="none")
