"""A real HTTP server on 127.0.0.1 that speaks the Kaggle public API (kagglesdk's JSON-over-POST protocol).

kaggle.com cannot be reached here, so the official ``kaggle`` client is pointed at this server
(``KAGGLE_API_ENVIRONMENT=LOCALHOST`` plus ``kagglesdk.kaggle_env._env_to_endpoint[KaggleEnv.LOCAL]``) and
talks to it over TCP. Protocol, as read from kagglesdk 2.2.4 (``kaggle_http_client.py`` and
``datasets/types/dataset_api_service.py``):

* every call is ``POST /api/v1/datasets.DatasetApiService/<Method>`` with a JSON body of the request's
  non-default fields in lowerCamelCase, enums by member name (``"sortBy": "DATASET_SORT_BY_VOTES"``);
* auth is HTTP Basic (username:key) or ``Authorization: Bearer <token>``;
* errors are JSON ``{"code": <status>, "message": ...}`` with that HTTP status (429 adds Retry-After);
* ``ListDatasets``      -> ``{"datasets": [ApiDataset], "nextPageToken": str}`` (paging by ``page`` or ``pageToken``);
* ``ListDatasetFiles``  -> ``{"datasetFiles": [ApiDatasetFile], "nextPageToken": str}``;
* ``GetDataset``        -> ``ApiDataset``;
* ``DownloadDataset``   -> 302 to a blob URL (a signed storage URL on kaggle.com) whose GET returns the bytes:
  the file itself, the file wrapped in a zip (``<name>.zip``), or the whole dataset as ``<slug>.zip``.

Datasets are synthetic and built in memory (CSV text, XLSX via openpyxl). Faults are scripted per method
(and optionally per dataset): HTTP status with Retry-After, a dropped connection, a truncated body.
The server records each call (method, body, auth kind and user: never the secret) for assertions.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
import zipfile
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote

SERVICE = "datasets.DatasetApiService"


@dataclass
class FakeFile:
    name: str
    data: bytes
    served: str = "raw"  # raw | zip (wrapped in <name>.zip) | evil_zip (member escapes with ../)
    listed_size: int | None = None  # what the listing claims, when it should differ from len(data)
    created: str = "2024-05-01T10:00:00.000Z"

    @property
    def size(self) -> int:
        return len(self.data) if self.listed_size is None else self.listed_size


@dataclass
class FakeDataset:
    owner: str
    slug: str
    title: str
    license_name: str
    license_group: str  # the server's own family for the license filter: CC | ODB | GPL | OTHER
    version: int
    files: list[FakeFile]
    votes: int = 0
    keywords: tuple[str, ...] = ()
    last_updated: str = "2025-03-04T05:06:07.000Z"
    total_bytes: int | None = None  # listed dataset size; defaults to the sum of listed file sizes
    download_status: int | None = None  # every DownloadDataset for it answers this status

    @property
    def ref(self) -> str:
        return f"{self.owner}/{self.slug}"

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files) if self.total_bytes is None else self.total_bytes

    def file(self, name: str) -> FakeFile:
        return next(f for f in self.files if f.name == name)


@dataclass
class Fault:
    method: str  # ListDatasets | ListDatasetFiles | DownloadDataset | GetDataset | blob
    kind: str = "status"  # status | drop | truncate | hang (answer normally after ``seconds``)
    status: int = 500
    retry_after: str | None = None
    times: int = 1
    ref: str | None = None  # only for this dataset ("owner/slug")
    file: str | None = None  # only for this file name (DownloadDataset's fileName, or a blob's file)
    seconds: float = 0.0


def csv_bytes(header: list[str], rows: list[list]) -> bytes:
    lines = [",".join(header)] + [",".join(str(v) for v in row) for row in rows]
    return ("\n".join(lines) + "\n").encode("utf-8")


def xlsx_bytes(sheets: dict[str, list[list]]) -> bytes:
    from openpyxl import Workbook

    wb = Workbook()
    wb.remove(wb.active)
    for title, rows in sheets.items():
        ws = wb.create_sheet(title)
        for row in rows:
            ws.append(row)
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def default_catalog() -> list[FakeDataset]:
    """Eight datasets match "sales" (votes 500..30, so the order is fixed) and two match "weather"."""
    sales = csv_bytes(
        ["month", "store", "revenue"], [[f"2023-{m:02d}", s, 1000 + 37 * m + s] for m in range(1, 13) for s in (1, 2)]
    )
    stores = xlsx_bytes(
        {
            "stores": [["store", "city"], [1, "Lyon"], [2, "Porto"]],
            "managers": [["store", "manager"], [1, "Ana"], [2, "Ben"]],
        }
    )
    train = csv_bytes(["day", "units"], [[d, 10 + d % 7] for d in range(1, 31)])
    stations = csv_bytes(["station", "lat", "lon"], [["A", 45.1, 4.8], ["B", 41.1, -8.6]])
    return [
        FakeDataset(
            "alice",
            "retail-sales",
            "Retail Sales 2023",
            "CC0: Public Domain",
            "CC",
            3,
            [FakeFile("sales.csv", sales), FakeFile("stores.xlsx", stores), FakeFile("README.md", b"# notes\n")],
            votes=500,
        ),
        FakeDataset(
            "bob",
            "sales-forecast",
            "Sales Forecast",
            "Attribution 4.0 International (CC BY 4.0)",
            "CC",
            2,
            [FakeFile("data/train.csv", train, served="zip"), FakeFile("notes.txt", b"n\n")],
            votes=400,
        ),
        FakeDataset(
            "carol",
            "sales-proprietary",
            "Sales Secrets",
            "Other (specified in description)",
            "OTHER",
            1,
            [FakeFile("sales.csv", sales)],
            votes=300,
        ),
        FakeDataset(
            "dave",
            "sales-images",
            "Sales Receipt Images",
            "CC0: Public Domain",
            "CC",
            1,
            [FakeFile("receipt1.png", b"\x89PNG\r\n\x1a\n" + b"0" * 64), FakeFile("meta.json", b"{}")],
            votes=200,
        ),
        FakeDataset(
            "erin",
            "sales-broken",
            "Broken Sales Mirror",
            "CC BY-SA 4.0",
            "CC",
            5,
            [FakeFile("data.csv", sales)],
            votes=150,
            download_status=500,
        ),
        FakeDataset(
            "frank",
            "sales-huge",
            "Huge Sales Dump",
            "CC0: Public Domain",
            "CC",
            1,
            [FakeFile("big.csv", sales)],
            votes=100,
            total_bytes=10 * 1024**3,
        ),
        FakeDataset(
            "grace",
            "sales-evil",
            "Sales Zip Trick",
            "CC0: Public Domain",
            "CC",
            1,
            [FakeFile("report.csv", sales, served="evil_zip")],
            votes=50,
        ),
        FakeDataset(
            "heidi",
            "sales-bigfile",
            "Sales With A Big File",
            "Open Database License (ODbL)",
            "ODB",
            4,
            [FakeFile("small.csv", stations), FakeFile("huge.csv", sales, listed_size=50 * 1024**2)],
            votes=30,
        ),
        FakeDataset(
            "ivan",
            "weather-daily",
            "Daily Weather",
            "CC BY-NC-SA 4.0",
            "CC",
            1,
            [FakeFile("daily.csv", train)],
            votes=90,
        ),
        FakeDataset(
            "judy",
            "weather-stations",
            "Weather Stations",
            "CC0: Public Domain",
            "CC",
            7,
            [FakeFile("stations.csv", stations)],
            votes=80,
        ),
    ]


def weekly_catalog(weeks: int) -> list[FakeDataset]:
    """One "sales" dataset ``wk/sales-wNN`` last updated on each Monday from 2026-01-05 (week 0), 09:00 UTC."""
    out = []
    for w in range(weeks):
        day = datetime(2026, 1, 5, 9, tzinfo=UTC) + timedelta(weeks=w)
        data = csv_bytes(["day", "units"], [[d, w * 100 + d] for d in range(1, 31)])
        out.append(
            FakeDataset(
                "wk",
                f"sales-w{w:02d}",
                f"Sales week {w}",
                "CC0: Public Domain",
                "CC",
                1,
                [FakeFile("units.csv", data)],
                last_updated=day.isoformat().replace("+00:00", ".000Z"),
            )
        )
    return out


def _json_dataset(ds: FakeDataset) -> dict:
    return {
        "id": zlib.crc32(ds.ref.encode()) % 10**6,
        "ref": ds.ref,
        "title": ds.title,
        "subtitle": f"{ds.title} (synthetic)",
        "creatorName": ds.owner.title(),
        "ownerName": ds.owner.title(),
        "ownerRef": ds.owner,
        "url": f"https://www.kaggle.com/datasets/{ds.ref}",
        "licenseName": ds.license_name,
        "totalBytes": ds.size,
        "lastUpdated": ds.last_updated,
        "currentVersionNumber": ds.version,
        "voteCount": ds.votes,
        "downloadCount": ds.votes * 10,
        "usabilityRating": 0.88,
        "tags": [{"ref": k, "name": k} for k in ds.keywords],
    }


def _json_file(ds: FakeDataset, f: FakeFile) -> dict:
    return {
        "ref": f"{ds.ref}/{f.name}",
        "datasetRef": ds.ref,
        "ownerRef": ds.owner,
        "name": f.name,
        "creationDate": f.created,
        "fileType": "." + f.name.rsplit(".", 1)[-1],
        "totalBytes": f.size,
        "columns": [],
    }


class FakeKaggleServer:
    def __init__(
        self,
        username: str = "tester",
        key: str = "k-secret",
        api_token: str | None = None,
        catalog: list[FakeDataset] | None = None,
    ):
        self.username, self.key, self.api_token = username, key, api_token
        self.catalog = catalog if catalog is not None else default_catalog()
        self.faults: list[Fault] = []
        self.calls: list[dict] = []
        self.emit_page_tokens = True
        self.honor_max_size = True
        self.list_versions = True  # False: search hits omit currentVersionNumber (client must ask GetDataset)
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle --------------------------------------------------------------------------------------
    def start(self) -> FakeKaggleServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-kaggle", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=5)
            self._httpd = None

    def __enter__(self) -> FakeKaggleServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    # scripting --------------------------------------------------------------------------------------
    def reset(self) -> None:
        with self._lock:
            self.catalog = default_catalog()
            self.faults.clear()
            self.calls.clear()
            self.emit_page_tokens = True
            self.honor_max_size = True
            self.list_versions = True

    def fail(
        self,
        method: str,
        status: int = 500,
        *,
        times: int = 1,
        retry_after: str | None = None,
        ref: str | None = None,
        file: str | None = None,
        kind: str = "status",
        seconds: float = 0.0,
    ) -> None:
        with self._lock:
            self.faults.append(Fault(method, kind, status, retry_after, times, ref, file, seconds))

    def dataset(self, ref: str) -> FakeDataset:
        return next(d for d in self.catalog if d.ref == ref)

    def calls_to(self, method: str, ref: str | None = None) -> list[dict]:
        with self._lock:
            return [c for c in self.calls if c["method"] == method and (ref is None or c.get("ref") == ref)]

    # internals --------------------------------------------------------------------------------------
    def _take_fault(self, method: str, ref: str | None, file: str | None = None) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if (
                    fault.method == method
                    and fault.times > 0
                    and fault.ref in (None, ref)
                    and fault.file in (None, file)
                ):
                    fault.times -= 1
                    return fault
        return None

    def _auth(self, header: str | None) -> tuple[str | None, str | None]:
        """(auth kind, username) when the credentials are right, (None, None) otherwise."""
        if not header:
            return None, None
        scheme, _, value = header.partition(" ")
        if scheme == "Basic":
            try:
                user, _, key = base64.b64decode(value).decode("utf-8").partition(":")
            except (ValueError, UnicodeDecodeError):
                return None, None
            return ("basic", user) if (user, key) == (self.username, self.key) else (None, None)
        if scheme == "Bearer" and self.api_token and value == self.api_token:
            return "bearer", None
        return None, None

    def search(self, body: dict) -> list[FakeDataset]:
        words = (body.get("search") or "").lower().split()
        hits = [d for d in self.catalog if all(w in f"{d.title} {' '.join(d.keywords)}".lower() for w in words)]
        group = body.get("license", "DATASET_LICENSE_GROUP_ALL").removeprefix("DATASET_LICENSE_GROUP_")
        if group != "ALL":
            hits = [d for d in hits if d.license_group == group]
        if body.get("fileType") == "DATASET_FILE_TYPE_GROUP_CSV":
            hits = [d for d in hits if any(f.name.lower().endswith(".csv") for f in d.files)]
        if self.honor_max_size and body.get("maxSize") is not None:
            hits = [d for d in hits if d.size <= int(body["maxSize"])]
        if body.get("minSize") is not None:
            hits = [d for d in hits if d.size >= int(body["minSize"])]
        sort = body.get("sortBy", "DATASET_SORT_BY_HOTTEST")
        if sort == "DATASET_SORT_BY_UPDATED":
            hits.sort(key=lambda d: (d.last_updated, d.ref), reverse=True)
        else:
            hits.sort(key=lambda d: (-d.votes, d.ref))
        return hits


def _token(offset: int) -> str:
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode()


def _offset(token: str) -> int:
    text = base64.urlsafe_b64decode(token.encode()).decode()
    if not text.startswith("offset:"):
        raise ValueError(token)
    return int(text.split(":", 1)[1])


def _handler(server: FakeKaggleServer):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def handle(self) -> None:
            try:
                super().handle()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test); nothing to answer

        # replies ----------------------------------------------------------------------------------
        def _send(self, status: int, body: bytes, content_type: str, headers: dict | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, payload: dict, headers: dict | None = None) -> None:
            self._send(status, json.dumps(payload).encode(), "application/json", headers)

        def _error(self, status: int, message: str, headers: dict | None = None) -> None:
            self._json(status, {"code": status, "message": message}, headers)

        def _fault(self, fault: Fault, body: bytes = b"", content_type: str = "text/csv") -> None:
            if fault.kind == "drop":
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if fault.kind == "truncate":
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
                return
            headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else None
            self._error(fault.status, "Too Many Requests" if fault.status == 429 else "scripted failure", headers)

        # API ---------------------------------------------------------------------------------------
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            prefix = f"/api/v1/{SERVICE}/"
            if not self.path.startswith(prefix):
                return self._error(404, f"unknown endpoint {self.path}")
            method = self.path[len(prefix) :]
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                return self._error(400, "body is not JSON")
            ref = f"{body['ownerSlug']}/{body['datasetSlug']}" if "ownerSlug" in body else None
            kind, user = server._auth(self.headers.get("Authorization"))
            with server._lock:
                server.calls.append({"method": method, "body": body, "ref": ref, "auth": kind, "user": user})
            if kind is None:
                return self._error(401, "Unauthenticated")
            fault = server._take_fault(method, ref, body.get("fileName"))
            if fault is not None and fault.kind == "hang":
                time.sleep(fault.seconds)  # then answer normally, to a client that has given up
            elif fault is not None:
                return self._fault(fault)
            handler = getattr(self, f"_api_{method}", None)
            if handler is None:
                return self._error(404, f"unknown method {method}")
            return handler(body, ref)

        def _dataset_for(self, body: dict, ref: str | None) -> FakeDataset | None:
            try:
                ds = server.dataset(ref)
            except StopIteration:
                self._error(404, f"dataset {ref} not found")
                return None
            wanted = body.get("datasetVersionNumber")
            if wanted is not None and int(wanted) != ds.version:
                self._error(404, f"dataset {ref} has no version {wanted}")
                return None
            return ds

        def _api_ListDatasets(self, body: dict, _ref) -> None:
            hits = server.search(body)
            size = int(body.get("pageSize") or 20)
            try:
                start = _offset(body["pageToken"]) if body.get("pageToken") else (int(body.get("page") or 1) - 1) * size
            except (ValueError, UnicodeDecodeError):
                return self._error(400, "invalid page token")
            page = hits[start : start + size]
            more = start + size < len(hits)
            listed = [_json_dataset(d) for d in page]
            if not server.list_versions:
                for d in listed:
                    del d["currentVersionNumber"]
            self._json(
                200,
                {"datasets": listed, "nextPageToken": _token(start + size) if more and server.emit_page_tokens else ""},
            )

        def _api_GetDataset(self, body: dict, ref) -> None:
            ds = self._dataset_for(body, ref)
            if ds is not None:
                self._json(200, _json_dataset(ds))

        def _api_ListDatasetFiles(self, body: dict, ref) -> None:
            ds = self._dataset_for(body, ref)
            if ds is None:
                return
            size = int(body.get("pageSize") or 20)
            start = _offset(body["pageToken"]) if body.get("pageToken") else 0
            files = ds.files[start : start + size]
            more = start + size < len(ds.files)
            self._json(
                200,
                {
                    "datasetFiles": [_json_file(ds, f) for f in files],
                    "nextPageToken": _token(start + size) if more else "",
                },
            )

        def _api_DownloadDataset(self, body: dict, ref) -> None:
            ds = self._dataset_for(body, ref)
            if ds is None:
                return
            if ds.download_status is not None:
                return self._error(ds.download_status, "download backend unavailable")
            name = body.get("fileName")
            if name:
                try:
                    f = ds.file(name)
                except StopIteration:
                    return self._error(404, f"file {name} not found in {ref}")
                served = name + (".zip" if f.served in ("zip", "evil_zip") else "")
            else:
                served = f"{ds.slug}.zip"
            location = f"/blobs/{ds.owner}/{ds.slug}/{ds.version}/{quote(served)}"
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        # blobs (the storage side of the redirect; signed URLs need no auth) -----------------------
        def do_GET(self) -> None:
            parts = self.path.split("?")[0].split("/", 5)
            if len(parts) != 6 or parts[1] != "blobs":
                return self._error(404, "not found")
            _, _, owner, slug, version, served = parts
            served = unquote(served)
            ref = f"{owner}/{slug}"
            with server._lock:
                server.calls.append({"method": "blob", "ref": ref, "path": served, "auth": None, "user": None})
            try:
                ds = server.dataset(ref)
            except StopIteration:
                return self._error(404, "no such blob")
            if served == f"{slug}.zip":
                body, ctype = zip_bytes({f.name: f.data for f in ds.files}), "application/zip"
            else:
                f = next(
                    (f for f in ds.files if f.name == served or (f.served != "raw" and f.name + ".zip" == served)), None
                )
                if f is None:
                    return self._error(404, "no such blob")
                if f.served == "zip":
                    body, ctype = zip_bytes({f.name.rsplit("/", 1)[-1]: f.data}), "application/zip"
                elif f.served == "evil_zip":
                    body, ctype = zip_bytes({"../../evil.csv": f.data}), "application/zip"
                else:
                    body, ctype = f.data, "application/octet-stream"
            fault = server._take_fault("blob", ref, None if served == f"{slug}.zip" else f.name)
            if fault is not None:
                return self._fault(fault, body, ctype)
            self._send(200, body, ctype, {"Last-Modified": "Tue, 04 Mar 2025 05:06:07 GMT"})

    return Handler
