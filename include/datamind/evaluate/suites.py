"""Evaluation suites: the benchmarks (``datamind.benchmarks``) plus the project's own held-out split."""

from __future__ import annotations

from datamind.benchmarks import (  # noqa: F401 - the suite API in one place
    EvalItem,
    Loaded,
    SuiteError,
    load_benchmark,
    load_bird,
    load_dabench,
    load_tablebench,
)
from datamind.evaluate.params import SUITE_KINDS

# -- the project's own held-out split ----------------------------------------------------------


def _user_turn(messages) -> str | None:
    return next((m["content"] for m in messages or [] if m["role"] == "user"), None)


def load_heldout(root, version: int | None = None) -> Loaded:
    """Test-split samples of a published dataset version (the latest complete one by default)."""
    from datamind.tables import read_manifest, release_dir, release_rows

    manifest = read_manifest(root, version)
    if manifest is None:
        raise SuiteError("no published dataset version to take a held-out split from")
    folder = release_dir(manifest["version"])
    out = Loaded([])
    for r in sorted(release_rows(root, folder).to_pylist(), key=lambda r: r["sample_id"]):
        if r.get("split") != "test":
            continue
        out.items.append(
            EvalItem(
                suite="heldout",
                item_id=r["query_id"],
                question=r["question"],
                data_path=root.path(folder, r["data_uri"]),
                data_format=r["data_format"],
                category=r["category"],
                gold=r.get("reference_answer") or r["final_answer"],
                hop=int(r["hop"]),
                extra={"dataset_version": manifest["version"], "user": _user_turn(r["messages"])},
            )
        )
    if not out.items:
        raise SuiteError(f"dataset v{manifest['version']} has no test split")
    return out


def load_suite(kind: str, location: str, *, root=None, table_dir: str | None = None) -> Loaded:
    if kind == "heldout":
        raw = str(location or "").strip().lstrip("v")
        version = int(raw) if raw.isdigit() else None  # "latest", "" or a path: the latest version
        return load_heldout(root, version)
    if kind not in SUITE_KINDS:
        raise SuiteError(f"unknown suite kind {kind!r}; known: {', '.join(SUITE_KINDS)}")
    return load_benchmark(kind, location, table_dir)
