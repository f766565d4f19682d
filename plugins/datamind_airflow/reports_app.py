"""The quality reports inside the Airflow UI: a FastAPI app the api-server mounts at ``/datamind``.

    /datamind/reports/                          every report, newest first (regenerated from summary.json files)
    /datamind/reports/<stage>/<run>/            one report (rendered from its summary.json and validation.json)
    /datamind/reports/<stage>/<run>/<file>      its validation.json, summary.json, Data Docs pages
    /datamind/task/<dag_id>/<run_id>/<task_id>  the report a task wrote (the task's "Quality report" link)
    /datamind/viewer/                           the sample viewer: every release, its audit and promotion
    /datamind/viewer/releases/<v>/              a release's samples, filtered and paged (?category=&hop=&q=&page=)
    /datamind/viewer/releases/<v>/samples/<id>  one sample as a conversation (a stable link)
    /datamind/viewer/releases/<v>/rejections/   what the runs that fed a release rejected
    /datamind/viewer/runs/<run>/<kind>/[<id>]   one run's trajectories, rejections or trajectories the judge did
                                                not select (not_selected), and one of them
    /datamind/viewer/backfills/<dag_id>/<run>/  one ingest run across the chain it woke, to the release it reached

Files are read from the data root (a local folder or object storage), so any api-server shows what any worker
wrote. Every route needs a logged-in Airflow user, as the rest of the UI does; there are no API docs routes.

The app is served in the Airflow UI's origin, next to the session cookie that the REST API accepts, and its pages
show text that workers and models wrote. So: every page is rendered by ``datamind.templating`` (escaped);
every response carries ``SecurityHeaders`` (a CSP that allows no script at all, nosniff, same-origin framing);
the data root's own files (Great Expectations' Data Docs carry inline script) are served in a CSP sandbox, an
opaque origin without script; and a report page is always rendered afresh from its JSON, never the stored
report.html, so what the UI shows is what this code escaped.
"""

from __future__ import annotations

import json
import logging
import mimetypes
import posixpath
import re
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from datamind.templating import render, style_hashes
from datamind_airflow.urls import PREFIX, VIEWER

log = logging.getLogger(__name__)

_SAFE_PART = re.compile(r"^[A-Za-z0-9._+=-][A-Za-z0-9._+= -]*$")

# Our pages: no script from anywhere, only our own stylesheets (by hash), forms submit to us, and only the
# Airflow UI (same origin) may frame them.
PAGE_POLICY = "; ".join(
    [
        "default-src 'none'",
        "style-src " + " ".join(style_hashes()),
        "form-action 'self'",
        "base-uri 'none'",
        "frame-ancestors 'self'",
    ]
)
# Files of the data root (Data Docs, JSON): shown as they are, but in a sandbox, an opaque origin that runs no
# script, submits no form and loads nothing from the network (Data Docs' CDN styling included), so their inline
# script and anything a worker wrote into them cannot act as the logged-in user.
FILE_POLICY = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'self'"


class SecurityHeaders:
    """Every response of the app (pages, JSON, files, errors, redirects) gets the security headers: the page
    policy unless the route chose a stricter one (FILE_POLICY). An exception no route handled becomes a plain
    500 here, so that it carries them too (Starlette's own error page is outside the app's middleware)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=message)
                headers.setdefault("Content-Security-Policy", PAGE_POLICY)
                headers["X-Content-Type-Options"] = "nosniff"
                headers["X-Frame-Options"] = "SAMEORIGIN"
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except Exception:
            if started:
                raise
            log.exception("%s %s failed", scope.get("method"), scope.get("path"))
            await PlainTextResponse("Internal error (see the api-server's log).", 500)(
                scope, receive, send_with_headers
            )


async def _logged_in(request: Request) -> None:
    """The Airflow user of the request (bearer token or the UI's session cookie), else 401."""
    from airflow.api_fastapi.core_api.security import get_user

    token = request.headers.get("authorization", "")
    creds = None
    if token.lower().startswith("bearer "):
        from fastapi.security import HTTPAuthorizationCredentials

        creds = HTTPAuthorizationCredentials(scheme="Bearer", credentials=token.split(" ", 1)[1])
    await get_user(request, None, creds)


def _root():
    from datamind_airflow import runtime

    return runtime.data_root()


def _manifest(root, version_id: str) -> dict:
    """The release's manifest, or a 404 naming the release."""
    from datamind.review import query

    manifest = query.manifest(root, version_id)
    if manifest is None:
        raise HTTPException(404, f"no such release: {version_id}")
    return manifest


def _safe(path: str) -> str:
    """A relative path under reports/ with no way out of it."""
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") or not _SAFE_PART.match(p) for p in parts):
        raise HTTPException(404, "no such report file")
    return "/".join(parts)


def _index_html(root) -> str:
    from datamind.quality.report_index import load_summaries, render_index

    return render_index(load_summaries(root))


def _report_html(root, rel_dir: str) -> str:
    from datamind.quality.report_index import current_release
    from datamind.quality.report_page import render_report

    summary = posixpath.join(rel_dir, "summary.json")
    if not root.exists(summary):
        raise HTTPException(404, "no such report")
    validation_rel = posixpath.join(rel_dir, "validation.json")
    validation = json.loads(root.read_text(validation_rel)) if root.exists(validation_rel) else {}
    # a release's report shows the decision its manifest records now, not the state it was published in
    return render_report(current_release(root, json.loads(root.read_text(summary))), validation)


def find_task_report(root, dag_id: str, run_id: str, task_id: str) -> str | None:
    """reports/<stage>/<run>/ written by that task of that run (newest first), else None."""
    from datamind.quality.report_index import REPORTS, load_summaries
    from datamind.quality.validate import path_segment

    try:
        run_dir = path_segment(run_id, "run_id")
    except ValueError:  # nothing of it survives as a folder name: no run of that id wrote anything
        return None
    for doc in load_summaries(root):
        origin = doc.get("origin") or {}
        same_run = doc.get("_dir", "").endswith("/" + run_dir)
        if same_run and origin.get("dag_id") == dag_id and origin.get("task_id") == task_id:
            return posixpath.join(REPORTS, doc["_dir"])
    return None


def create_app(chains=None) -> FastAPI:
    """The app; ``chains``: where the backfill pages read Airflow's records of runs and Asset events
    (``datamind_airflow.chain``, the api-server's metadata database; a stand-in in tests)."""
    # No /docs, /redoc or /openapi.json: they would be the app's only routes outside the login, and nobody
    # calls this app as an API.
    app = FastAPI(
        title="DataMind quality reports",
        dependencies=[Depends(_logged_in)],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.add_middleware(SecurityHeaders)

    @app.get("/reports/", response_class=HTMLResponse)
    def index() -> str:
        return _index_html(_root())

    @app.get("/reports/{path:path}")
    def report_file(path: str) -> Response:
        from datamind.quality.report_index import REPORTS

        root = _root()
        parts = _safe(path).split("/")
        if parts == ["index.html"]:  # the reports link to it relatively, as they do on disk
            return HTMLResponse(_index_html(root))
        if len(parts) == 2 or (len(parts) == 3 and parts[2] == "report.html"):
            return HTMLResponse(_report_html(root, posixpath.join(REPORTS, *parts[:2])))
        rel = posixpath.join(REPORTS, *parts)
        if not root.exists(rel):
            raise HTTPException(404, "no such report file")
        media = mimetypes.guess_type(rel)[0] or "application/octet-stream"
        with root.open(root.path(rel)) as fh:
            return Response(fh.read(), media_type=media, headers={"Content-Security-Policy": FILE_POLICY})

    _viewer_routes(app, chains)

    @app.get("/task/{dag_id}/{run_id}/{task_id}")
    def task_report(dag_id: str, run_id: str, task_id: str):
        from datamind.quality.report_index import REPORTS

        found = find_task_report(_root(), dag_id, run_id, task_id)
        if found is None:
            page = render(
                "quality/no_report.html.j2",
                dag_id=dag_id,
                run_id=run_id,
                task_id=task_id,
                reports_href=f"{PREFIX}/reports/",
            )
            return HTMLResponse(page, status_code=404)
        rel = posixpath.relpath(found, REPORTS)
        return RedirectResponse(f"{PREFIX}/reports/{quote(rel)}/", status_code=307)

    return app


_MAX_SEARCH = 200
# query.page lists at most this many values of a filter: a shorter list is every value the table has.
_FACET_LIMIT = 200


def _list_params(request: Request, source) -> tuple[dict[str, str], str, str]:
    """The filters, search text and page (its digits) a list was asked for. A parameter the list does not
    take, one given twice, a search past its length or a page that is not a whole number from 1 is a 400."""
    params = request.query_params
    allowed = (*source.filters, "q", "page")
    unknown = sorted(k for k in params if k not in allowed)
    if unknown:
        raise HTTPException(
            400, f"this list takes no parameter {', '.join(map(repr, unknown))}; it takes {', '.join(allowed)}"
        )
    repeated = sorted(k for k in params if len(params.getlist(k)) > 1)
    if repeated:
        raise HTTPException(400, f"give each parameter once: {', '.join(repeated)} came more than once")
    chosen = {k: params[k] for k in source.filters if params.get(k)}
    text = params.get("q") or ""
    if len(text) > _MAX_SEARCH:
        raise HTTPException(400, f"the search text is {len(text)} characters; at most {_MAX_SEARCH} are searched")
    given = params.get("page") or "1"
    digits = given.lstrip("0")
    if not (given.isascii() and given.isdigit() and digits):
        raise HTTPException(400, f"page must be a whole number from 1, not {given!r}")
    return chosen, text, digits


def _list_page(root, source, request: Request):
    """The page of a list the request asked for; 400 for a page past the last, or for a filter value the list
    never has (a typo in a pasted link would otherwise read as "0 matching")."""
    from datamind.review import query

    chosen, text, digits = _list_params(request, source)
    # a larger OFFSET overflows duckdb's 64-bit integers (a 500 before); no table has that many pages
    last_queryable = 2**62 // query.PAGE_SIZE
    number = int(digits) if len(digits) <= 18 else last_queryable + 1
    page = query.page(root, source, chosen, text, min(number, last_queryable))
    if number > page.pages:
        raise HTTPException(400, f"page {digits} is out of range: this list has pages 1 to {page.pages}")
    for name, value in chosen.items():
        known = page.facets.get(name)
        if known is not None and len(known) < _FACET_LIMIT and value not in {str(v) for v, _ in known}:
            shown = ", ".join(str(v) for v, _ in known[:20]) + (", ..." if len(known) > 20 else "")
            raise HTTPException(400, f"no row of this list has {name} {value!r}; its values are: {shown or 'none'}")
    return page, chosen, text


def _viewer_routes(app: FastAPI, chains=None) -> None:
    from datamind.review import pages, query

    links = pages.Links(VIEWER)
    if chains is None:
        from datamind_airflow import chain as chains

    def backfills_of(manifest: dict) -> list[tuple[str, str]]:
        """(label, href) of the backfill pages of the ingest runs that led to this release."""
        from sqlalchemy.exc import SQLAlchemyError

        try:
            run_id = chains.publish_run_of(manifest.get("run_id") or "")
            found = chains.ingests_of("publish_dataset", run_id) if run_id else []
        except SQLAlchemyError:  # the metadata database out of reach: the release page still shows the release
            log.warning("no backfills for %s", manifest.get("version_id"), exc_info=True)
            return []
        return [(f"{dag_id} {rid}", links.backfill(dag_id, rid)) for dag_id, rid in found]

    @app.get("/viewer/backfills/{dag_id}/{run_id}/", response_class=HTMLResponse)
    def viewer_backfill(dag_id: str, run_id: str) -> str:
        from datamind.publish.changes import changes_of
        from datamind.review.chain import chain_page

        if not dag_id.startswith("ingest_"):
            raise HTTPException(404, f"a backfill page follows an ingest run; {dag_id} is not an ingest DAG")
        walk = chains.downstream(dag_id, run_id)
        if walk is None:
            raise HTTPException(404, f"{dag_id} has no run {run_id}")
        root = _root()

        def changes(version_id: str):
            manifest = query.manifest(root, version_id)
            return changes_of(root, manifest) if manifest is not None else None

        return chain_page(links, walk, query.releases(root), changes)

    @app.get("/viewer/", response_class=HTMLResponse)
    def viewer_home() -> str:
        return pages.releases_page(links, query.releases(_root()))

    @app.get("/viewer/releases/{version_id}/", response_class=HTMLResponse)
    def viewer_release(version_id: str, request: Request) -> str:
        root = _root()
        manifest = _manifest(root, version_id)
        from datamind.publish.changes import changes_of
        from datamind.quality.report_index import release_report

        source = query.release_source(version_id)
        page, chosen, text = _list_page(root, source, request)
        return pages.release_page(
            links, version_id, manifest, page, source, chosen, text,
            changes=changes_of(root, manifest), report=release_report(root, version_id, manifest.get("run_id")),
            backfills=backfills_of(manifest),
        )  # fmt: skip

    @app.get("/viewer/releases/{version_id}/rejections/", response_class=HTMLResponse)
    def viewer_release_rejections(version_id: str, request: Request) -> str:
        from datamind.publish.changes import previous_version

        root = _root()
        manifest = _manifest(root, version_id)
        number = previous_version(root, int(manifest["version"]))
        previous = query.manifest(root, f"v{number}") if number is not None else None
        source = query.release_rejections_source((previous or {}).get("created_at"), manifest.get("created_at"))
        page, chosen, text = _list_page(root, source, request)
        return pages.release_rejections_page(
            links, version_id, manifest, previous and previous.get("version_id"), page, source, chosen, text
        )

    @app.get("/viewer/releases/{version_id}/samples/{sample_id}", response_class=HTMLResponse)
    def viewer_sample(version_id: str, sample_id: str) -> str:
        try:
            row = query.item(_root(), query.release_source(version_id), sample_id)
        except LookupError as exc:
            raise HTTPException(404, str(exc)) from exc
        if row is None:
            raise HTTPException(404, f"release {version_id} has no sample {sample_id}")
        return pages.sample_page(links, version_id, row)

    @app.get("/viewer/runs/{run_id}/{kind}/", response_class=HTMLResponse)
    def viewer_run(run_id: str, kind: str, request: Request) -> str:
        try:
            source = query.run_source(kind, run_id)
        except LookupError as exc:
            raise HTTPException(404, str(exc)) from exc
        page, chosen, text = _list_page(_root(), source, request)
        return pages.run_page(links, run_id, page, source, chosen, text)

    @app.get("/viewer/runs/{run_id}/{kind}/{key}", response_class=HTMLResponse)
    def viewer_run_item(run_id: str, kind: str, key: str) -> str:
        root = _root()
        try:
            source = query.run_source(kind, run_id)
        except LookupError as exc:
            raise HTTPException(404, str(exc)) from exc
        row = query.item(root, source, key)
        if row is None:
            raise HTTPException(404, f"run {run_id} has no {kind} row {key}")
        if kind == "trajectories":
            return pages.trajectory_page(links, run_id, row)
        judged = query.judged_sample(root, key) if row.get("stage") == query.PUBLISH_REJECTIONS else None
        shown = [] if judged is not None or not row.get("query_id") else query.trajectories_of(root, row["query_id"])
        return pages.rejection_page(links, run_id, row, judged, shown, kind)
