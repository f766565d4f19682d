"""List the files of a source (local directory, glob, ``.zip`` archive, any fsspec URL) with size caps.

Nothing here parses content. Listing never fails on a single bad file: a file that is too large, or an
archive member whose decompressed size breaks the zip-bomb guard, is still listed, with a ``precheck``
reason code, so it lands in the catalog as rejected instead of vanishing.

URIs of archive members use fsspec's chained form ``zip://<member>::<archive uri>``, so
``fsspec.open(uri)`` opens them too; we read them ourselves, though, to enforce the size caps while
streaming (fsspec would trust the declared size).
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import posixpath
import re
import stat
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import fsspec
from fsspec.core import url_to_fs

from datamind.settings import Limits

_CHUNK = 1 << 20
_SKIP_DIRS = {"__MACOSX", ".git", "__pycache__"}
GLOB_CHARS = set("*?[")


class SourceReadError(Exception):
    """A file could not be read within the limits; ``code`` is a rules reason code."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class SourceFile:
    rel_path: str  # posix path relative to the source root; part of the file id
    source_uri: str  # where this one file lives (local path, fsspec URL, or zip://member::archive)
    size: int  # bytes as listed (declared size for archive members)
    read_cap: int  # never read more than this many bytes of content
    precheck: str | None = None  # reason code decided without reading (file_too_large, archive_bomb)
    provenance: dict[str, Any] = field(default_factory=dict)  # JSON-able facts about the file's origin

    @property
    def filename(self) -> str:
        return posixpath.basename(self.rel_path)

    def read_bytes(self) -> bytes:
        if self.precheck:
            raise SourceReadError(self.precheck, precheck_message(self))
        return read_source_bytes(self.source_uri, self.read_cap)

    def sha256(self) -> str:
        """Content hash, streamed; files refused by the precheck hash a descriptor instead (never read)."""
        if self.precheck:
            return hashlib.sha256(f"unread:{self.source_uri}:{self.size}".encode()).hexdigest()
        h = hashlib.sha256()
        for chunk in iter_source_chunks(self.source_uri, self.read_cap):
            h.update(chunk)
        return h.hexdigest()

    def to_spec(self) -> dict[str, Any]:
        return {
            "rel_path": self.rel_path,
            "source_uri": self.source_uri,
            "size": self.size,
            "read_cap": self.read_cap,
            "precheck": self.precheck,
            "provenance": self.provenance,
        }

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> SourceFile:
        return cls(
            rel_path=spec["rel_path"],
            source_uri=spec["source_uri"],
            size=int(spec["size"]),
            read_cap=int(spec["read_cap"]),
            precheck=spec.get("precheck"),
            provenance=dict(spec.get("provenance") or {}),
        )


def precheck_message(f: SourceFile) -> str:
    if f.precheck == "archive_bomb":
        return f"archive member declares {f.size:,} bytes uncompressed, above the {f.read_cap:,}-byte zip-bomb cap"
    return f"file is {f.size:,} bytes, above the {f.read_cap:,}-byte limit (not read)"


# -- reading -----------------------------------------------------------------------------------
def split_zip_uri(uri: str) -> tuple[str, str] | None:
    if uri.startswith("zip://") and "::" in uri:
        member, archive = uri[len("zip://") :].split("::", 1)
        return member, archive
    return None


def open_nofollow(path: str) -> int:
    """A descriptor for reading the regular file at ``path``, following no symlink on the way.

    Each folder is opened from the one above it with O_NOFOLLOW and the file itself with O_NOFOLLOW |
    O_NONBLOCK: an entry swapped for a link (or a FIFO) after the folder was listed is refused, never
    followed or waited on. Listing records real paths, so a legitimate file has no link on its way."""
    parts = [p for p in os.path.abspath(path).split("/") if p]
    if not parts:
        raise SourceReadError("not_a_regular_file", "the source path is the file system's root")
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        leaf = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise SourceReadError(
                "unsafe_path", "a symlink stands on this file's path since its folder was listed; not followed"
            ) from exc
        raise
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(leaf).st_mode):
        os.close(leaf)
        raise SourceReadError("not_a_regular_file", "no longer a regular file (swapped since listing); not read")
    os.set_blocking(leaf, True)
    return leaf


def _open_local_or_remote(uri: str):
    if "://" not in uri:
        return os.fdopen(open_nofollow(uri), "rb")
    return fsspec.open(uri, "rb").open()


def _open_archive(archive_uri: str):
    return _open_local_or_remote(archive_uri)


def iter_source_chunks(uri: str, cap: int) -> Iterator[bytes]:
    """Stream a file's bytes; raises SourceReadError once more than ``cap`` bytes come out."""
    zipped = split_zip_uri(uri)
    total = 0
    if zipped:
        member, archive = zipped
        try:
            with _open_archive(archive) as raw, zipfile.ZipFile(raw) as zf:
                info = zf.getinfo(member)
                if info.file_size > cap:
                    raise SourceReadError("archive_bomb", f"{member}: declares {info.file_size:,} bytes, cap {cap:,}")
                with zf.open(info) as fh:
                    while chunk := fh.read(_CHUNK):
                        total += len(chunk)
                        # The declared size can lie; the stream is what counts.
                        if total > cap:
                            raise SourceReadError(
                                "archive_bomb",
                                f"{member}: decompressed past the {cap:,}-byte cap (declared {info.file_size:,})",
                            )
                        yield chunk
        except (zipfile.BadZipFile, zlib.error, KeyError, EOFError) as exc:
            # zipfile stops at the declared size and then fails the CRC check: a lying header ends here.
            raise SourceReadError("unloadable", f"{member}: corrupt archive member: {exc}") from exc
        return
    with _open_local_or_remote(uri) as fh:
        while chunk := fh.read(_CHUNK):
            total += len(chunk)
            if total > cap:
                raise SourceReadError("file_too_large", f"file grew past the {cap:,}-byte limit while reading")
            yield chunk


def read_source_bytes(uri: str, cap: int) -> bytes:
    buf = io.BytesIO()
    for chunk in iter_source_chunks(uri, cap):
        buf.write(chunk)
    return buf.getvalue()


# -- listing -----------------------------------------------------------------------------------
def _file_entry(rel_path: str, uri: str, size: int, limits: Limits) -> SourceFile:
    cap = limits.max_file_bytes
    return SourceFile(rel_path, uri, size, cap, "file_too_large" if size > cap else None)


def _hidden(rel_path: str) -> bool:
    parts = rel_path.split("/")
    return any(p.startswith(".") or p in _SKIP_DIRS for p in parts)


def _unsafe(rel_path: str, uri: str, why: str) -> SourceFile:
    """An entry recorded as rejected without ever being read."""
    return SourceFile(rel_path, uri, 0, 0, "unsafe_path", {"read_error": why})


def _escapes(member: str) -> bool:
    name = member.replace("\\", "/")
    return name.startswith("/") or bool(re.match(r"^[A-Za-z]:", name)) or ".." in name.split("/")


def list_zip(archive_uri: str, limits: Limits, prefix: str = "") -> list[SourceFile]:
    """Members of a zip archive; sizes come from the central directory, checked again while reading."""
    out: list[SourceFile] = []
    seen: set[str] = set()
    with _open_archive(archive_uri) as raw, zipfile.ZipFile(raw) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            if info.filename in seen:  # zipfile reads only the last of same-named members: say so, lose none
                why = f"a second archive member named {info.filename!r}; only one of them can be read by name"
                rel = posixpath.join(prefix, info.filename) if prefix else info.filename
                out.append(
                    SourceFile(f"{rel}#{len([f for f in out if f.rel_path.startswith(rel)])}",
                               f"zip://{info.filename}::{archive_uri}", info.file_size, 0, "duplicate_member",
                               {"read_error": why})
                )  # fmt: skip
                continue
            seen.add(info.filename)
            if _escapes(info.filename):  # before the hidden-name check: "../x" must not vanish silently
                why = f"archive member {info.filename!r} is named outside the archive (absolute or '..'); not extracted"
                out.append(_unsafe(info.filename.lstrip("/"), f"zip://{info.filename}::{archive_uri}", why))
                continue
            if _hidden(info.filename):
                continue
            rel = posixpath.join(prefix, info.filename) if prefix else info.filename
            uri = f"zip://{info.filename}::{archive_uri}"
            cap = min(limits.max_uncompressed_bytes, limits.max_file_bytes)
            if info.file_size > limits.max_uncompressed_bytes:
                out.append(SourceFile(rel, uri, info.file_size, limits.max_uncompressed_bytes, "archive_bomb"))
            elif info.file_size > limits.max_file_bytes:
                out.append(SourceFile(rel, uri, info.file_size, limits.max_file_bytes, "file_too_large"))
            else:
                out.append(SourceFile(rel, uri, info.file_size, cap))
    return sorted(out, key=lambda f: f.rel_path)


def _list_local(path: str, limits: Limits) -> list[SourceFile]:
    path = os.path.abspath(path)
    if os.path.isfile(path):
        real = os.path.realpath(path)
        if path.lower().endswith(".zip") and zipfile.is_zipfile(real):
            return list_zip(real, limits)
        return [_local_entry(real, os.path.basename(path), limits, None)]
    out = []
    inside = os.path.realpath(path) + os.sep
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]  # os.walk never descends them
        for name in sorted(filenames) + links:
            if name.startswith("."):
                continue
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, path).replace(os.sep, "/")
            entry = _local_entry(full, rel, limits, inside)
            if name not in links or entry.precheck == "unsafe_path":  # a link to a folder inside is walked
                out.append(entry)
    return out


# A staged copy is named "<hash>-<name>": a longer name than this would not fit a file system's 255 bytes.
MAX_NAME_BYTES = 200


def _local_entry(full: str, rel: str, limits: Limits, inside: str | None) -> SourceFile:
    """One folder entry, judged from lstat/stat alone (never opened): a regular file to read, or a recorded
    rejection for what cannot be read (a dangling or looping link, a FIFO or device, a name that is not UTF-8
    or too long to stage, a link out of the source folder)."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(rel).decode("utf-8", "backslashreplace")
        return SourceFile(
            shown, os.fsencode(full).decode("utf-8", "backslashreplace"), 0, 0, "undecodable_name",
            {"read_error": f"the file name {shown!r} is not valid UTF-8; not read"},
        )  # fmt: skip
    if len(os.path.basename(full).encode("utf-8")) > MAX_NAME_BYTES:
        why = f"the file name is {len(os.path.basename(full).encode())} bytes, above {MAX_NAME_BYTES}; not staged"
        return SourceFile(rel, full, 0, 0, "name_too_long", {"read_error": why})
    try:
        link = os.path.islink(full)
        if link and inside is not None and not os.path.realpath(full).startswith(inside):
            return _unsafe(rel, full, "symlink pointing outside the source folder; not followed")
        st = os.stat(full)  # follows a link inside the folder; ELOOP / ENOENT for a looping or dangling one
    except OSError as exc:
        why = f"entry cannot be read: {exc.strerror or exc} ({'a symlink' if os.path.islink(full) else 'a file'})"
        return SourceFile(rel, full, 0, 0, "unreadable_entry", {"read_error": why})
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "a device"
        why = f"{kind}, not a regular file; never opened"
        return SourceFile(rel, full, 0, 0, "not_a_regular_file", {"read_error": why})
    # Read later through its real path, where no link is left to follow (open_nofollow refuses any).
    return _file_entry(rel, os.path.realpath(full), st.st_size, limits)


def _glob_base(pattern: str) -> str:
    parts = pattern.split("/")
    base = []
    for p in parts:
        if GLOB_CHARS & set(p):
            break
        base.append(p)
    return "/".join(base) or "/"


def list_source_files(source_uri: str, limits: Limits | None = None) -> list[SourceFile]:
    """Every file under ``source_uri`` (sorted by rel_path); raises FileNotFoundError when it is empty or absent."""
    limits = limits or Limits.from_env()
    local = "://" not in source_uri or source_uri.startswith("file://")
    if local:
        path = source_uri[len("file://") :] if source_uri.startswith("file://") else source_uri
        if GLOB_CHARS & set(path):
            import glob

            base = os.path.abspath(_glob_base(path))
            inside = os.path.realpath(base) + os.sep
            hits = sorted(h for h in glob.glob(path, recursive=True) if not os.path.isdir(h))
            files = [
                _local_entry(
                    os.path.abspath(h), os.path.relpath(os.path.abspath(h), base).replace(os.sep, "/"), limits, inside
                )
                for h in hits
            ]
            files = [f for f in files if not _hidden(f.rel_path)]
        elif os.path.exists(path):
            files = _list_local(path, limits)
        else:
            raise FileNotFoundError(f"source {source_uri!r} does not exist")
    else:
        files = _list_fsspec(source_uri, limits)
    if not files:
        raise FileNotFoundError(f"source {source_uri!r} holds no files")
    return sorted(files, key=lambda f: f.rel_path)


def _list_fsspec(source_uri: str, limits: Limits) -> list[SourceFile]:
    fs, path = url_to_fs(source_uri)
    proto = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol

    def url(p: str) -> str:
        return f"{proto}://{p}"

    if GLOB_CHARS & set(path):
        base = _glob_base(path)
        infos = fs.glob(path, detail=True)
    elif fs.isdir(path):
        base = path
        infos = fs.find(path, detail=True)
    else:
        if path.lower().endswith(".zip"):
            return list_zip(url(path), limits)
        base = posixpath.dirname(path)
        infos = {path: fs.info(path)}
    out = []
    for p, info in sorted(infos.items()):
        if info.get("type") == "directory":
            continue
        rel = posixpath.relpath(p, base) if base not in ("", "/") else p.lstrip("/")
        if _hidden(rel):
            continue
        out.append(_file_entry(rel, url(p), int(info.get("size") or 0), limits))
    return out


def source_label(uri: str) -> str:
    """A short name for a source URI: its last path component without globs or archive suffixes."""
    tail = uri.split("::")[-1].rstrip("/").split("://", 1)[-1]
    parts = [p for p in tail.split("/") if p and not any(ch in p for ch in "*?[")]
    name = parts[-1] if parts else "source"
    return re.sub(r"[^\w.-]", "_", name.removesuffix(".zip")) or "source"


def names_one_file(uri: str) -> bool:
    """Whether ``uri`` is one plain file (not a folder, a glob or a ``.zip`` whose members are the files)."""
    if GLOB_CHARS & set(uri.split("::")[-1]) or uri.lower().rstrip("/").endswith(".zip"):
        return False
    if "://" not in uri or uri.startswith("file://"):
        return os.path.isfile(uri.removeprefix("file://"))
    fs, path = url_to_fs(uri)
    return fs.isfile(path)


def list_sources(uris: list[str], limits: Limits | None = None) -> list[SourceFile]:
    """The files of several sources in one listing (a backfill of many folders or prefixes in one run).

    One source keeps its files' paths as they are; with several, each file's ``rel_path`` starts with its
    source's label (``2024-q1/sales.csv``), so equal names in different sources stay distinct files. A source
    that is one file is listed under its own name (labelled, it would be ``sales.csv/sales.csv``); only a
    name an earlier source already took goes under the label of its folder (``2024-q2/sales.csv``)."""
    uris = list(dict.fromkeys(uris))  # a source named twice is listed once
    if len(uris) == 1:
        return list_source_files(uris[0], limits)
    labels: list[str] = []
    out: list[SourceFile] = []
    for uri in uris:
        files = list_source_files(uri, limits)
        one = names_one_file(uri)
        label: str | None = None
        if not one or any(f.rel_path == files[0].rel_path for f in out):
            label = source_label((uri.rsplit("/", 1)[0] or "/") if one else uri)
            while label in labels:
                label = f"{label}_{len(labels)}"
            labels.append(label)
        for f in files:
            rel = f"{label}/{f.rel_path}" if label else f.rel_path
            out.append(replace(f, rel_path=rel, provenance={**f.provenance, "source_uri": uri}))
    return out
