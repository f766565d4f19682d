"""What changed since the previous release: samples added and dropped, per source and per file, per category and
hop, and the audit figures that moved.

A reviewer at the approval gate asks "what is new in this release, and does it come from where I expect?" A
backfill of three new files that also re-synthesized every old file shows here as hundreds of samples added on
files the previous release already covered. The comparison is computed once when a release is published and kept
in its manifest (``changes``), so the approval task, the report and the sample viewer show the same numbers; a
release published before that is compared when a page asks (``changes_of``).

Plain data in, plain data out: ``compare`` takes two ``Side``s (a release's sample ids with their file, category
and hop, its files' names and sources, its audit figures) and returns a JSON-able dict; ``as_markdown`` writes
it for the approval task's text.
"""

from __future__ import annotations

import posixpath
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from datamind import tables
from datamind.assets import DIRS
from datamind.publish.audit import verdicts
from datamind.schemas import DATASET
from datamind.shards import read_table
from datamind.storage import DataRoot
from datamind.tables import read_manifest, release_dir, versions

COLUMNS = ["sample_id", "file_id", "category", "hop"]
_READ = [*COLUMNS, "data_uri"]  # a file's name, where neither the manifest nor the catalog names it
# Files listed one by one; the rest are summed in one line (a backfill of thousands of files stays readable).
MAX_FILES = 40
# Files a release kept as they were, named on one line: enough to see the covered files were left alone.
MAX_UNCHANGED_FILES = 20


@dataclass
class Side:
    """One release as the comparison reads it."""

    version_id: str
    samples: dict[str, tuple[str, str, int]]  # sample_id -> (file_id, category, hop)
    files: dict[str, dict[str, str | None]] = field(default_factory=dict)  # file_id -> {"name", "source"}
    audit: dict = field(default_factory=dict)
    promotion: str | None = None


def _samples(table: pa.Table) -> dict[str, tuple[str, str, int]]:
    cols = [table[c].to_pylist() for c in COLUMNS]
    return {sid: (fid, cat, int(hop) if hop is not None else 0) for sid, fid, cat, hop in zip(*cols, strict=True)}


def _file_names(manifest: Mapping) -> dict[str, str]:
    """file_id -> the file's name, from the paths a release carries (``files/<file_id>/<name>``)."""
    return {fid: posixpath.basename(f.get("path") or "") for fid, f in (manifest.get("files") or {}).items()}


def _catalog(root: DataRoot, file_ids: set[str]) -> dict[str, dict[str, str | None]]:
    """file_id -> {"name", "source"} from the catalog, for the given files only."""
    if not file_ids or not root.exists(DIRS["catalog_files"]):
        return {}
    cols = ["file_id", "source", "rel_path"]
    rows = tables.read(root, "catalog_files", cols, where=("file_id", file_ids)).to_pylist()
    return {r["file_id"]: {"name": posixpath.basename(r["rel_path"] or ""), "source": r["source"]} for r in rows}


def _describe_files(
    root: DataRoot, manifest: Mapping, file_ids: set[str], uris: Mapping[str, str]
) -> dict[str, dict[str, str | None]]:
    known = _catalog(root, file_ids)
    names = _file_names(manifest)
    return {
        fid: {
            "name": names.get(fid)
            or (known.get(fid) or {}).get("name")
            or posixpath.basename(uris.get(fid) or "")
            or fid,
            "source": (known.get(fid) or {}).get("source"),
        }
        for fid in file_ids
    }


def side_of(root: DataRoot, manifest: Mapping, samples: pa.Table) -> Side:
    """A release from its manifest and its rows (``COLUMNS``, and ``data_uri`` if it has one)."""
    got = _samples(samples.select(COLUMNS))
    uris = {}
    if "data_uri" in samples.column_names:
        for fid, uri in zip(samples["file_id"].to_pylist(), samples["data_uri"].to_pylist(), strict=True):
            if uri:
                uris.setdefault(fid, uri)
    return Side(
        version_id=manifest.get("version_id") or f"v{manifest.get('version')}",
        samples=got,
        files=_describe_files(root, manifest, {fid for fid, _, _ in got.values()}, uris),
        audit=manifest.get("audit") or {},
        promotion=(manifest.get("promotion") or {}).get("status"),
    )


def release_side(root: DataRoot, version: int) -> Side | None:
    """A published release read back from its folder (only the comparison's columns), or None."""
    manifest = read_manifest(root, version)
    if manifest is None:
        return None
    parts = root.glob(release_dir(version), "part-*.parquet")  # not the data files the release carries
    rows = read_table(root, DATASET, release_dir(version), columns=_READ, paths=parts)
    return side_of(root, manifest, rows)


def previous_version(root: DataRoot, version: int) -> int | None:
    """The newest complete release published before ``v<version>``."""
    earlier = [n for n, complete in versions(root) if complete and n < version]
    return earlier[-1] if earlier else None


def compare(before: Side | None, after: Side) -> dict[str, Any]:
    """What ``after`` adds to and drops from ``before`` (None: the first release, everything is added)."""
    old = before.samples if before is not None else {}
    new = after.samples
    added = [sid for sid in new if sid not in old]
    dropped = [sid for sid in old if sid not in new]
    files = {**(before.files if before is not None else {}), **after.files}
    old_files = {fid for fid, _, _ in old.values()}
    new_files = {fid for fid, _, _ in new.values()}

    def breakdown(key) -> list[dict[str, Any]]:
        """Samples before, after, added and dropped per ``key(sample)``; largest change first."""
        counts = [
            Counter(key(old[sid]) for sid in old),
            Counter(key(new[sid]) for sid in new),
            Counter(key(new[sid]) for sid in added),
            Counter(key(old[sid]) for sid in dropped),
        ]
        rows = [dict(zip(("before", "after", "added", "dropped"), (c.get(k, 0) for c in counts), strict=True))
                | {"key": k} for k in set(counts[0]) | set(counts[1])]  # fmt: skip
        return sorted(rows, key=lambda r: (-(r["added"] + r["dropped"]), str(r["key"])))

    by_file = breakdown(lambda s: s[0])
    named = Counter((files.get(row["key"]) or {}).get("name") or row["key"] for row in by_file)
    for row in by_file:
        fid = row.pop("key")
        info = files.get(fid) or {}
        name = info.get("name") or fid
        # what a person reads: the name, and the id's start where two files share a name
        label = f"{name} ({fid[:8]})" if named[name] > 1 and name != fid else name
        row.update(file_id=fid, name=name, label=label, source=info.get("source") or "(unknown)")
        row["new_file"] = fid not in old_files and before is not None
        row["gone_file"] = fid not in new_files
    source_of = {fid: (files.get(fid) or {}).get("source") or "(unknown)" for fid in old_files | new_files}
    by_source = breakdown(lambda s: source_of[s[0]])
    for row in by_source:
        row["source"] = row.pop("key")
    by_category_hop = breakdown(lambda s: (s[1], s[2]))
    for row in by_category_hop:
        row["category"], row["hop"] = row.pop("key")
    on_new_files = sum(1 for sid in added if new[sid][0] not in old_files) if before is not None else len(added)
    changed_files = [r for r in by_file if r["added"] or r["dropped"]]
    unchanged_files = sorted((r for r in by_file if not (r["added"] or r["dropped"])), key=lambda r: r["label"])
    out = {
        "previous": before.version_id if before is not None else None,
        "previous_promotion": before.promotion if before is not None else None,
        "samples": {
            "before": len(old),
            "after": len(new),
            "added": len(added),
            "dropped": len(dropped),
            "unchanged": len(new) - len(added),
        },
        "added_on_new_files": on_new_files,
        "added_on_covered_files": len(added) - on_new_files,
        "files": {
            "before": len(old_files),
            "after": len(new_files),
            "new": len(new_files - old_files),
            "gone": len(old_files - new_files),
        },
        "by_source": [r for r in by_source if r["added"] or r["dropped"]],
        "by_file": changed_files[:MAX_FILES],
        "more_files": max(0, len(changed_files) - MAX_FILES),
        # only a name and a count each: a release over thousands of untouched files keeps a small manifest
        "unchanged_files": [
            {"label": r["label"], "samples": r["after"]} for r in unchanged_files[:MAX_UNCHANGED_FILES]
        ],
        "n_unchanged_files": len(unchanged_files),
        "by_category_hop": sorted(
            (r for r in by_category_hop if r["added"] or r["dropped"]), key=lambda r: (r["category"], r["hop"])
        ),
        "audit": _moved_figures(before.audit if before is not None else {}, after.audit),
    }
    out["headline"] = headline(out)
    return out


def _moved_figures(before: Mapping, after: Mapping) -> list[dict[str, Any]]:
    """The audit figures whose value changed, with their verdict before and after (a first release: every one)."""
    old = {v["name"]: v for v in verdicts(before)} if before else {}
    moved = []
    for v in verdicts(after) if after else []:
        was = old.get(v["name"])
        if was is not None and was["value"] == v["value"]:
            continue
        moved.append(
            {
                "name": v["name"],
                "before": was["value"] if was is not None else None,
                "after": v["value"],
                "op": v["op"],
                "bound": v["bound"],
                "ok_before": was["ok"] if was is not None else None,
                "ok_after": v["ok"],
            }
        )
    return moved


def since_previous(root: DataRoot | str, manifest: Mapping, samples: pa.Table) -> dict[str, Any]:
    """What a release being published (``manifest`` and its kept rows) changes from the newest complete release
    before it: what publishing records as the manifest's ``changes``."""
    root = DataRoot.of(root)
    number = previous_version(root, int(manifest["version"]))
    before = release_side(root, number) if number is not None else None
    return compare(before, side_of(root, manifest, samples))


def changes_of(root: DataRoot | str, manifest: Mapping) -> dict[str, Any] | None:
    """A published release's changes: as recorded in its manifest, else compared now (releases published before
    the comparison was recorded). None when its rows cannot be read."""
    if manifest.get("changes") is not None:
        return manifest["changes"]
    root = DataRoot.of(root)
    number = manifest.get("version")
    if number is None:
        return None
    after = release_side(root, int(number))
    if after is None:
        return None
    previous = previous_version(root, int(number))
    return compare(release_side(root, previous) if previous is not None else None, after)


def _signed(n: int) -> str:
    return f"+{n:,}" if n > 0 else f"{n:,}"


def headline(changes: Mapping) -> str:
    """One sentence: samples added and dropped, and where the added ones come from."""
    s = changes.get("samples") or {}
    prev = changes.get("previous")
    files = changes.get("files") or {}
    if prev is None:
        return f"First release: {s.get('after', 0):,} samples from {files.get('after', 0)} files."
    text = (
        f"Since {prev}: {s.get('added', 0):,} samples added, {s.get('dropped', 0):,} dropped "
        f"({s.get('before', 0):,} -> {s.get('after', 0):,})."
    )
    if s.get("added"):
        text += (
            f" Of the added: {changes.get('added_on_new_files', 0):,} on {files.get('new', 0)} file(s) new to this "
            f"release, {changes.get('added_on_covered_files', 0):,} on files {prev} already covered."
        )
    return text


def _unchanged_markdown(changes: Mapping) -> str | None:
    """The line naming the files a release left as they were, "N files unchanged: a.csv 3 -> 3; ... and M more."
    (the pages write the same line, escaped for HTML), or None when no file is unchanged."""
    n = int(changes.get("n_unchanged_files") or 0)
    if not n:
        return None
    named = [f"{_md(r['label'])} {r['samples']:,} -> {r['samples']:,}" for r in changes.get("unchanged_files") or []]
    more = f"; ... and {n - len(named):,} more" if n > len(named) else ""
    return f"{n:,} file{'s' if n != 1 else ''} unchanged: " + "; ".join(named) + more + "."


def as_markdown(changes: Mapping | None, limit: int = 10) -> list[str]:
    """The comparison as Markdown lines for the approval task (the pages show it whole)."""
    if not changes:
        return []
    lines = ["**What changed.** " + headline(changes), ""]
    sources = changes.get("by_source") or []
    if sources:
        per_source = [
            f"{_md(r['source'])} {r['before']:,} -> {r['after']:,} (+{r['added']:,} / -{r['dropped']:,})"
            for r in sources
        ]
        lines.append("Per source: " + "; ".join(per_source) + ".")
    files = changes.get("by_file") or []
    if files:
        lines += ["", "| file | source | before | after | added | dropped |", "|---|---|---|---|---|---|"]
        for r in files[:limit]:
            mark = " (new)" if r.get("new_file") else " (gone)" if r.get("gone_file") else ""
            name = _md(r.get("label") or r["name"]) + mark
            lines.append(
                f"| {name} | {_md(r['source'])} | {r['before']} | {r['after']} | {r['added']} | {r['dropped']} |"
            )
        more = len(files) - limit + int(changes.get("more_files") or 0)
        if more > 0:
            lines.append(f"| ... {more} more file(s) | | | | | |")
    unchanged = _unchanged_markdown(changes)
    if unchanged:
        lines += ["", unchanged]
    moved = [
        f"{m['name']} {m['before']} -> {m['after']}"
        + (" (now misses)" if m["ok_after"] is False and m["ok_before"] is not False else "")
        + (" (now meets)" if m["ok_after"] is True and m["ok_before"] is False else "")
        for m in changes.get("audit") or []
        if m.get("before") is not None
    ]
    if moved:
        lines += ["", "Audit figures that moved: " + "; ".join(moved) + "."]
    return lines


def _md(text: Any) -> str:
    """A value inside a Markdown table cell: no cell break, no markup."""
    out = str(text)
    for ch in "\\|*_`[]<>#":
        out = out.replace(ch, "\\" + ch)
    return out.replace("\n", " ")
