"""Kaggle crawler behind ``ingest_kaggle``: search public datasets, download their CSV/XLSX files with provenance.

Input: a ``KaggleCrawlConfig`` (queries, license allow-list, file types, size caps, paging, retries),
``KaggleCredentials`` and a destination folder. Output (``CrawlResult``):

* ``files``    one ``DownloadedFile`` per file written to ``<dest>/<owner>/<dataset>/<version>/<file>``;
* ``skipped``  datasets/files passed over by policy (license, size, no CSV/XLSX, version already seen);
* ``failures`` datasets that kept failing after retries (the crawl goes on without them);
* ``completed`` ``seen_key``s of dataset versions fetched in full, to feed back as ``already_seen``.

The official ``kaggle`` package authenticates when imported (printing help and touching the network),
so it is imported here only inside ``crawl_kaggle``, silenced. Credentials go to the kagglesdk client as
constructor arguments: no kaggle.json is written and the process environment is not touched. The client
talks to whichever endpoint ``KAGGLE_API_ENVIRONMENT`` selects (production by default).

A dataset version is all-or-nothing: if one of its wanted files cannot be fetched, the files already
fetched for it are removed and the dataset is recorded as failed, so a rerun retries it whole.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from datamind.ids import sha256_file
from datamind.ingest.kaggle_config import KaggleCrawlConfig, KaggleCredentials, license_id
from datamind.ingest.kaggle_fetch import (
    CallFailed,
    RetryPolicy,
    TooLarge,
    UnsafeArchive,
    call_with_retries,
    discard,
    is_zip,
    remove_tree_if_empty,
    safe_member_path,
    stream_to_file,
    unwrap_single_file,
)

__all__ = [
    "CrawlResult",
    "DownloadedFile",
    "KaggleAuthError",
    "KaggleCrawlConfig",
    "KaggleCredentials",
    "crawl_kaggle",
    "seen_key",
]

log = logging.getLogger("datamind.ingest.kaggle")

_SLUG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")
_IMPORT_LOCK = threading.Lock()
_TMP_DIR = ".kaggle-tmp"
_MAX_FILE_PAGES = 50
KAGGLE_WEB = "https://www.kaggle.com/datasets"


class KaggleAuthError(RuntimeError):
    """No usable credentials, or Kaggle refused them: nothing can be crawled, so the task must fail."""


def seen_key(ref: str, version: int | str) -> str:
    """Identity of one dataset version, e.g. ``alice/air-quality@3``."""
    return f"{ref}@{version}"


@dataclass(frozen=True)
class DownloadedFile:
    local_path: str
    rel_path: str  # <owner>/<dataset>/<version>/<file>
    provenance: dict[str, Any]


@dataclass
class CrawlResult:
    files: list[DownloadedFile] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (for XCom or a run report)."""
        return asdict(self)


# -- kaggle client ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Sdk:
    KaggleApi: Any
    KaggleEnv: Any
    get_env: Callable[[], Any]
    get_access_token_from_env: Callable[[], Any]
    ApiListDatasetsRequest: Any
    ApiListDatasetFilesRequest: Any
    ApiDownloadDatasetRequest: Any
    ApiGetDatasetRequest: Any
    DatasetSortBy: Any
    DatasetFileTypeGroup: Any
    DatasetLicenseGroup: Any


def _load_sdk() -> _Sdk:
    """Import ``kaggle`` with its import-time stdout/stderr chatter swallowed (it prints auth help there)."""
    with _IMPORT_LOCK, contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from kaggle.api.kaggle_api_extended import KaggleApi
    from kagglesdk.datasets.types.dataset_api_service import (
        ApiDownloadDatasetRequest,
        ApiGetDatasetRequest,
        ApiListDatasetFilesRequest,
        ApiListDatasetsRequest,
    )
    from kagglesdk.datasets.types.dataset_enums import DatasetFileTypeGroup, DatasetLicenseGroup, DatasetSortBy
    from kagglesdk.kaggle_env import KaggleEnv, get_access_token_from_env, get_env

    return _Sdk(
        KaggleApi,
        KaggleEnv,
        get_env,
        get_access_token_from_env,
        ApiListDatasetsRequest,
        ApiListDatasetFilesRequest,
        ApiDownloadDatasetRequest,
        ApiGetDatasetRequest,
        DatasetSortBy,
        DatasetFileTypeGroup,
        DatasetLicenseGroup,
    )


def _build_client(sdk: _Sdk, creds: KaggleCredentials):
    # The endpoint follows KAGGLE_API_ENVIRONMENT as read now (KaggleApi.args froze it at import time).
    # "--verbose" is never passed: the verbose client prints request headers, Authorization included.
    env = sdk.get_env()
    args = {
        sdk.KaggleEnv.LOCAL: ["--local"],
        sdk.KaggleEnv.STAGING: ["--staging"],
        sdk.KaggleEnv.ADMIN: ["--admin"],
    }.get(env, [])
    if creds.api_token:
        return sdk.KaggleApi.build_kaggle_client_with_params(args=args, api_token=creds.api_token)
    if sdk.get_access_token_from_env()[0]:
        log.warning(
            "an API token in KAGGLE_API_TOKEN or ~/.kaggle/access_token takes precedence over the "
            "given username/key (kagglesdk's order); remove it or pass the token instead"
        )
    return sdk.KaggleApi.build_kaggle_client_with_params(args=args, username=creds.username, password=creds.key)


def _apply_timeout(client, timeout_s: float) -> None:
    """kagglesdk sends without a timeout, so a stalled connection would hang the task forever; give its
    session adapters a default one (touches the client's session, the only place a timeout can go)."""
    from requests.adapters import HTTPAdapter

    class _TimeoutAdapter(HTTPAdapter):
        def send(self, request, **kwargs):
            if kwargs.get("timeout") is None:
                kwargs["timeout"] = timeout_s
            return super().send(request, **kwargs)

    session = getattr(client.http_client(), "_session", None)
    if session is not None:
        session.mount("http://", _TimeoutAdapter())
        session.mount("https://", _TimeoutAdapter())


def _upper_snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).upper()


def _license_group(sdk: _Sdk, licenses: Iterable[str]):
    """Narrow the server-side search to one license family when the whole allow-list sits in it;
    the allow-list itself is always re-checked on our side."""
    groups = set()
    for lic in licenses:
        lid = lic.lower() if lic.lower() in _FAMILY else license_id(lic)
        groups.add(_FAMILY.get(lid, "OTHER"))
    only = groups.pop() if len(groups) == 1 else "ALL"
    return sdk.DatasetLicenseGroup[f"DATASET_LICENSE_GROUP_{only}"]


_FAMILY = {
    **{k: "CC" for k in ("cc0", "cc-by", "cc-by-sa", "cc-by-nc", "cc-by-nc-sa", "cc-by-nd", "cc-by-nc-nd")},
    **{k: "ODB" for k in ("pddl", "odc-by", "odbl")},
    **{k: "GPL" for k in ("gpl", "lgpl", "agpl")},
}


def _iso(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.isoformat().replace("+00:00", "Z")
    return str(value)


def _extension(name: str) -> str:
    return os.path.splitext(name)[1].lower().lstrip(".")


# -- the crawl --------------------------------------------------------------------------------------------


class _Crawl:
    def __init__(
        self,
        sdk: _Sdk,
        client,
        config: KaggleCrawlConfig,
        creds: KaggleCredentials,
        dest_dir: str,
        already_seen: set[str],
        policy: RetryPolicy,
    ):
        self.sdk, self.client, self.cfg, self.creds = sdk, client, config, creds
        self.api = client.datasets.dataset_api_client
        self.dest = os.path.abspath(dest_dir)
        self.already_seen = already_seen
        self.policy = policy
        self.result = CrawlResult()
        self.visited: set[str] = set()

    # recording ---------------------------------------------------------------------------------------
    def _skip(self, ref: str, version, code: str, reason: str, query: str, file: str | None = None) -> None:
        row = {"ref": ref, "version": version, "reason_code": code, "reason": reason, "query": query}
        if file is not None:
            row["file"] = file
        self.result.skipped.append(row)
        log.info("skip %s%s: %s", ref, f" [{file}]" if file else "", reason)

    def _fail(
        self, ref: str, version, stage: str, reason: str, attempts: int, query: str, file: str | None = None
    ) -> None:
        row = {
            "ref": ref,
            "version": version,
            "stage": stage,
            "reason": self.creds.redact(reason),
            "attempts": attempts,
            "query": query,
        }
        if file is not None:
            row["file"] = file
        self.result.failures.append(row)
        log.warning("failed %s at %s after %d attempt(s): %s", ref, stage, attempts, row["reason"])

    def _call(self, fn: Callable[[], Any], what: str):
        return call_with_retries(fn, self.policy, what, redact=self.creds.redact)

    # search ------------------------------------------------------------------------------------------
    def _search_request(self, query: str):
        cfg, sdk = self.cfg, self.sdk
        req = sdk.ApiListDatasetsRequest()
        req.search = query
        req.sort_by = sdk.DatasetSortBy[f"DATASET_SORT_BY_{_upper_snake(cfg.sort_by)}"]
        # The API's file-type filter knows CSV but not XLSX, so it can only narrow a CSV-only crawl.
        req.file_type = sdk.DatasetFileTypeGroup[
            "DATASET_FILE_TYPE_GROUP_CSV" if set(cfg.file_types) == {"csv"} else "DATASET_FILE_TYPE_GROUP_ALL"
        ]
        req.license = _license_group(sdk, cfg.licenses)
        req.max_size = cfg.max_dataset_bytes
        req.page_size = cfg.page_size
        return req

    def run_query(self, query: str) -> None:
        taken = 0
        token: str | None = None
        server_pages_by_token = False
        counted = skipped_pages = 0
        page_no = 0
        while counted < self.cfg.max_pages:
            page_no += 1
            req = self._search_request(query)
            if token:
                req.page_token = token
            else:
                req.page = page_no
            try:
                resp, _ = self._call(functools.partial(self.api.list_datasets, req), f"search {query!r} page {page_no}")
            except CallFailed as exc:
                if exc.status in (401, 403):
                    raise KaggleAuthError(f"Kaggle refused the credentials (HTTP {exc.status})") from None
                self._fail(f"search:{query}", None, "search", exc.reason, exc.attempts, query)
                return
            datasets = [d for d in (resp.datasets or []) if d is not None]
            places = [self.cfg.in_window(d.last_updated) for d in datasets]
            log.info("query %r page %d: %d dataset(s)", query, page_no, len(datasets))
            for ds, place in zip(datasets, places, strict=True):
                if place == "in" and self._process(ds, query):
                    taken += 1
                    if taken >= self.cfg.max_datasets_per_query:
                        return
            if datasets and all(p == "older" for p in places):
                return  # newest first: everything after this page is before the window too
            if datasets and all(p == "newer" for p in places) and skipped_pages < self.cfg.max_skip_pages:
                skipped_pages += 1  # walking past datasets updated after the window costs no page budget
            else:
                counted += 1
            # Follow the server's page tokens; a server that never sends one is paged by number,
            # where only a full page hints at more.
            token = resp.next_page_token or None
            server_pages_by_token = server_pages_by_token or bool(token)
            if not datasets or (not token and (server_pages_by_token or len(datasets) < self.cfg.page_size)):
                return

    # one dataset -------------------------------------------------------------------------------------
    def _process(self, ds, query: str) -> bool:
        """Handle one search hit; True when a download was attempted (counts towards the per-query cap)."""
        ref = (ds.ref or "").strip()
        if ref in self.visited:
            return False
        self.visited.add(ref)
        owner, _, slug = ref.partition("/")
        version = ds.current_version_number or None  # kagglesdk reads an absent version as 0
        if not (_SLUG.match(owner) and _SLUG.match(slug)):
            self._skip(ref, version, "unsafe_name", "dataset ref is not an owner/slug pair", query)
            return False
        lic = ds.license_name
        if not self.cfg.allows_license(lic):
            self._skip(ref, version, "license_not_allowed", f"license not allowed: {lic!r} ({license_id(lic)})", query)
            return False
        if (ds.total_bytes or 0) > self.cfg.max_dataset_bytes:
            self._skip(
                ref,
                version,
                "too_large",
                f"too large: {ds.total_bytes} bytes > max_dataset_bytes {self.cfg.max_dataset_bytes}",
                query,
            )
            return False
        if version is None:
            try:
                req = self.sdk.ApiGetDatasetRequest()
                req.owner_slug, req.dataset_slug = owner, slug
                full, _ = self._call(lambda: self.api.get_dataset(req), f"get {ref}")
                version = full.current_version_number or None
            except CallFailed as exc:
                self._fail(ref, None, "metadata", exc.reason, exc.attempts, query)
                return True
            if version is None:
                self._fail(ref, None, "metadata", "Kaggle reports no version number", 1, query)
                return True
        key = seen_key(ref, version)
        if key in self.already_seen:
            self._skip(ref, version, "already_seen", f"already seen version {version}", query)
            return False

        try:
            listed = self._list_files(owner, slug, version)
        except CallFailed as exc:
            self._fail(ref, version, "list_files", exc.reason, exc.attempts, query)
            return True
        wanted = self._select_files(ref, version, listed, query)
        if not wanted:
            return False
        self._fetch_dataset(ds, owner, slug, version, wanted, query)
        return True

    def _list_files(self, owner: str, slug: str, version: int) -> list:
        files: list = []
        token: str | None = None
        for _ in range(_MAX_FILE_PAGES):
            req = self.sdk.ApiListDatasetFilesRequest()
            req.owner_slug, req.dataset_slug = owner, slug
            req.dataset_version_number = int(version)
            req.page_size = 200
            req.page_token = token or ""
            resp, _ = self._call(functools.partial(self.api.list_dataset_files, req), f"list files of {owner}/{slug}")
            if resp.error_message:
                raise CallFailed(f"Kaggle: {resp.error_message}", 1)
            files.extend(f for f in (resp.dataset_files or []) if f is not None)
            token = resp.next_page_token or None
            if not token:
                break
        return files

    def _select_files(self, ref: str, version, listed: list, query: str) -> list:
        types = set(self.cfg.file_types)
        tabular = [f for f in listed if f.name and _extension(f.name) in types]
        if not tabular:
            self._skip(
                ref,
                version,
                "no_tabular_files",
                f"no {'/'.join(self.cfg.file_types)} files among {len(listed)} file(s)",
                query,
            )
            return []
        wanted, seen_paths = [], set()
        for f in sorted(tabular, key=lambda f: f.name):
            safe = safe_member_path(f.name)
            if safe is None or safe.lower() in seen_paths:
                self._skip(ref, version, "unsafe_name", "file name escapes its folder or repeats", query, f.name)
                continue
            if (f.total_bytes or 0) > self.cfg.max_file_bytes:
                self._skip(
                    ref,
                    version,
                    "file_too_large",
                    f"too large: {f.total_bytes} bytes > max_file_bytes {self.cfg.max_file_bytes}",
                    query,
                    f.name,
                )
                continue
            if len(wanted) >= self.cfg.max_files_per_dataset:
                self._skip(
                    ref,
                    version,
                    "file_limit",
                    f"over max_files_per_dataset {self.cfg.max_files_per_dataset}",
                    query,
                    f.name,
                )
                continue
            seen_paths.add(safe.lower())
            wanted.append(f)
        if not wanted:
            self._skip(ref, version, "too_large", "every csv/xlsx file is over the caps", query)
        return wanted

    def _fetch_dataset(self, ds, owner: str, slug: str, version: int, wanted: list, query: str) -> None:
        ref = f"{owner}/{slug}"
        written: list[DownloadedFile] = []
        budget = self.cfg.max_dataset_bytes
        for f in wanted:
            rel = f"{owner}/{slug}/{version}/{safe_member_path(f.name)}"
            local = os.path.join(self.dest, *rel.split("/"))
            try:
                n_bytes, attempts = self._fetch_file(
                    owner, slug, version, f.name, local, min(self.cfg.max_file_bytes, budget)
                )
            except TooLarge as exc:
                self._skip(ref, version, "file_too_large", f"too large: {exc}", query, f.name)
                continue
            except (CallFailed, UnsafeArchive) as exc:
                stage = "extract" if isinstance(exc, UnsafeArchive) else "download"
                attempts = getattr(exc, "attempts", 1)
                discard([w.local_path for w in written], self.dest)
                remove_tree_if_empty(os.path.dirname(local), self.dest)
                self._fail(ref, version, stage, str(exc), attempts, query, f.name)
                return
            budget -= n_bytes
            with open(local, "rb") as fh:
                digest = sha256_file(fh)
            written.append(
                DownloadedFile(local, rel, self._provenance(ds, owner, slug, version, f, n_bytes, digest, query))
            )
        if not written:
            self._skip(ref, version, "too_large", "no file fitted under the caps", query)
            return
        self.result.files.extend(written)
        self.result.completed.append(seen_key(ref, version))
        log.info("fetched %s v%s: %d file(s)", ref, version, len(written))

    def _fetch_file(self, owner: str, slug: str, version: int, name: str, local: str, cap: int) -> tuple[int, int]:
        """Download one file to ``local`` (unwrapping Kaggle's per-file zip when it sends one)."""
        tmp_dir = os.path.join(self.dest, _TMP_DIR)
        os.makedirs(tmp_dir, exist_ok=True)
        raw = os.path.join(tmp_dir, uuid.uuid4().hex)

        def attempt() -> str:
            req = self.sdk.ApiDownloadDatasetRequest()
            req.owner_slug, req.dataset_slug = owner, slug
            req.dataset_version_number = int(version)
            req.file_name = name
            response = self.api.download_dataset(req)  # streamed, after following the redirect
            final_url = response.url or ""
            stream_to_file(response, raw, cap)
            return final_url

        try:
            final_url, attempts = self._call(attempt, f"download {owner}/{slug}/{name}")
            os.makedirs(os.path.dirname(local), exist_ok=True)
            served_name = final_url.split("?")[0].rstrip("/").rsplit("/", 1)[-1].lower()
            wrapped = (served_name.endswith(".zip") and not name.lower().endswith(".zip")) or (
                _extension(name) == "csv" and is_zip(raw)
            )
            if wrapped:
                n_bytes = unwrap_single_file(raw, name, local, cap)
            else:
                n_bytes = os.path.getsize(raw)
                os.replace(raw, local)
            return n_bytes, attempts
        finally:
            if os.path.exists(raw):
                os.remove(raw)
            with contextlib.suppress(OSError):
                os.rmdir(tmp_dir)

    def _provenance(self, ds, owner, slug, version, f, n_bytes: int, digest: str, query: str) -> dict[str, Any]:
        ref = f"{owner}/{slug}"
        return {
            "source": "kaggle",
            "dataset_ref": ref,
            "dataset_version": int(version),
            "title": ds.title,
            "license": ds.license_name,
            "license_id": license_id(ds.license_name),
            "url": ds.url or f"{KAGGLE_WEB}/{ref}",
            "version_url": f"{KAGGLE_WEB}/{ref}/versions/{version}",
            "owner": owner,
            "file_name": f.name,
            "file_size": f.total_bytes,  # as listed by Kaggle
            "size_bytes": n_bytes,  # as written here
            "sha256": digest,
            "last_updated": _iso(ds.last_updated),
            "file_created": _iso(f.creation_date),
            "query": query,
            "retrieved_at": _iso(datetime.now(UTC)),
        }


def crawl_kaggle(
    config: KaggleCrawlConfig,
    credentials: KaggleCredentials | None,
    dest_dir: str,
    already_seen: Iterable[str] = (),
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> CrawlResult:
    """Run every query in ``config`` and download the matching CSV/XLSX files under ``dest_dir``.

    ``credentials`` None means the standard Kaggle environment variables/files. ``already_seen`` holds
    ``seen_key``s (``owner/slug@version``) from earlier runs; those versions are skipped. Raises
    ``KaggleAuthError`` when no credentials exist or Kaggle rejects them; every other problem is
    recorded per dataset and the crawl continues. Rerunning writes the same paths (no duplicates).
    """
    creds = credentials if credentials is not None else KaggleCredentials.from_env()
    if not creds.present:
        raise KaggleAuthError(
            "no Kaggle credentials: configure the Airflow connection, or set KAGGLE_API_TOKEN "
            "(or KAGGLE_USERNAME and KAGGLE_KEY)"
        )
    os.makedirs(dest_dir, exist_ok=True)
    sdk = _load_sdk()
    policy = RetryPolicy(attempts=config.retries, base_s=config.backoff_base_s, max_s=config.backoff_max_s, sleep=sleep)
    client = _build_client(sdk, creds)
    with client:
        _apply_timeout(client, config.request_timeout_s)
        crawl = _Crawl(sdk, client, config, creds, dest_dir, set(already_seen or ()), policy)
        for query in config.queries:
            crawl.run_query(query)
    r = crawl.result
    log.info("kaggle crawl done: %d file(s), %d skipped, %d failed", len(r.files), len(r.skipped), len(r.failures))
    return r
