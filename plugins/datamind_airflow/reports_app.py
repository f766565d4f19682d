"""The quality reports inside the Airflow UI: a FastAPI app the api-server mounts at ``/datamind``.

    /datamind/reports/                          every report, newest first (regenerated from summary.json files)
    /datamind/reports/<stage>/<run>/            one report (report.html; rendered from its JSON if missing)
    /datamind/reports/<stage>/<run>/<file>      its validation.json, summary.json, Data Docs pages
    /datamind/task/<dag_id>/<run_id>/<task_id>  the report a task wrote (the task's "Quality report" link)
    /datamind/viewer/                           the sample viewer: every release, its audit and promotion
    /datamind/viewer/releases/<v>/              a release's samples, filtered and paged (?category=&hop=&q=&page=)
    /datamind/viewer/releases/<v>/samples/<id>  one sample as a conversation (a stable link)
    /datamind/viewer/runs/<run>/<kind>/[<id>]   one run's trajectories or rejections, and one of them

Files are read from the data root (a local folder or object storage), so any api-server shows what any worker
wrote. Every route needs a logged-in Airflow user, as the rest of the UI does.
"""

from __future__ import annotations

import json
import mimetypes
import posixpath
import re
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from datamind_airflow.urls import PREFIX, VIEWER

_SAFE_PART = re.compile(r"^[A-Za-z0-9._+=-][A-Za-z0-9._+= -]*$")


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
    from datamind.quality.report_page import render_report

    page = posixpath.join(rel_dir, "report.html")
    if root.exists(page):
        return root.read_text(page)
    summary = posixpath.join(rel_dir, "summary.json")
    if not root.exists(summary):
        raise HTTPException(404, "no such report")
    validation_rel = posixpath.join(rel_dir, "validation.json")
    validation = json.loads(root.read_text(validation_rel)) if root.exists(validation_rel) else {}
    return render_report(json.loads(root.read_text(summary)), validation)


def find_task_report(root, dag_id: str, run_id: str, task_id: str) -> str | None:
    """reports/<stage>/<run>/ written by that task of that run (newest first), else None."""
    from datamind.quality.report_index import REPORTS, load_summaries
    from datamind.quality.validate import path_segment

    run_dir = path_segment(run_id, "run_id")
    for doc in load_summaries(root):
        origin = doc.get("origin") or {}
        same_run = doc.get("_dir", "").endswith("/" + run_dir)
        if same_run and origin.get("dag_id") == dag_id and origin.get("task_id") == task_id:
            return posixpath.join(REPORTS, doc["_dir"])
    return None


def create_app() -> FastAPI:
    app = FastAPI(title="DataMind quality reports", dependencies=[Depends(_logged_in)])

    @app.get("/reports/", response_class=HTMLResponse)
    def index() -> str:
        return _index_html(_root())

    @app.get("/reports/{path:path}")
    def report_file(path: str) -> Response:
        from datamind.quality.report_index import REPORTS

        root = _root()
        rel = posixpath.join(REPORTS, _safe(path))
        if path.endswith("/") or path.count("/") == 1 and not posixpath.splitext(path)[1]:
            return HTMLResponse(_report_html(root, rel.rstrip("/")))
        if not root.exists(rel):
            raise HTTPException(404, f"no such report file: {path}")
        media = mimetypes.guess_type(rel)[0] or "application/octet-stream"
        with root.open(root.path(rel)) as fh:
            return Response(fh.read(), media_type=media)

    _viewer_routes(app)

    @app.get("/task/{dag_id}/{run_id}/{task_id}")
    def task_report(dag_id: str, run_id: str, task_id: str):
        from datamind.quality.report_index import REPORTS

        found = find_task_report(_root(), dag_id, run_id, task_id)
        if found is None:
            message = f"Task {dag_id}.{task_id} of run {run_id} has not written a quality report (yet)."
            return HTMLResponse(
                f"<!doctype html><meta charset='utf-8'><p>{message}</p>"
                f"<p><a href='{PREFIX}/reports/'>All reports</a></p>",
                status_code=404,
            )
        rel = posixpath.relpath(found, REPORTS)
        return RedirectResponse(f"{PREFIX}/reports/{quote(rel)}/", status_code=307)

    return app


def _chosen(request: Request, source) -> tuple[dict[str, str], str, int]:
    params = request.query_params
    chosen = {k: params[k] for k in source.filters if params.get(k)}  # anything else in the query is ignored
    try:
        number = max(1, int(params.get("page") or 1))
    except ValueError:
        number = 1
    return chosen, (params.get("q") or "")[:200], number


def _viewer_routes(app: FastAPI) -> None:
    from datamind.review import pages, query

    links = pages.Links(VIEWER)

    @app.get("/viewer/", response_class=HTMLResponse)
    def viewer_home() -> str:
        return pages.releases_page(links, query.releases(_root()))

    @app.get("/viewer/releases/{version_id}/", response_class=HTMLResponse)
    def viewer_release(version_id: str, request: Request) -> str:
        root = _root()
        manifest = query.manifest(root, version_id)
        if manifest is None:
            raise HTTPException(404, f"no such release: {version_id}")
        source = query.release_source(version_id)
        chosen, text, number = _chosen(request, source)
        page = query.page(root, source, chosen, text, number)
        return pages.release_page(links, version_id, manifest, page, source, chosen, text)

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
        chosen, text, number = _chosen(request, source)
        return pages.run_page(links, run_id, query.page(_root(), source, chosen, text, number), source, chosen, text)

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
        return pages.rejection_page(links, run_id, row, judged, shown)
