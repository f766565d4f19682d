"""The data root: one place (local path or any fsspec URL) where every stage reads and writes.

Writes are atomic so a crash or a killed task never leaves a partial file where readers look:
on a local or POSIX-like filesystem we write a hidden temporary sibling and rename it; on object
stores (s3, gs, az) a single PUT is already all-or-nothing, so we write the object directly.
Readers only ever glob ``*.parquet`` and skip dot-files, so temporaries are invisible to them.
"""

from __future__ import annotations

import os
import posixpath
import tempfile
import uuid
from dataclasses import dataclass

from fsspec.core import url_to_fs

from datamind.ids import stable_id

_OBJECT_STORE_PROTOCOLS = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "memory"}


@dataclass
class DataRoot:
    url: str

    @classmethod
    def of(cls, root: DataRoot | str) -> DataRoot:
        """``root`` itself, or the data root at that path or URL (stage functions accept either)."""
        return root if isinstance(root, DataRoot) else cls(root)

    def __post_init__(self) -> None:
        self.fs, self.root = url_to_fs(self.url)
        if self.is_local:
            self.root = os.path.abspath(self.root)
            os.makedirs(self.root, exist_ok=True)

    # -- paths -------------------------------------------------------------------------------
    @property
    def protocol(self) -> str:
        proto = self.fs.protocol
        return proto[0] if isinstance(proto, (tuple, list)) else proto

    @property
    def is_local(self) -> bool:
        return self.protocol in ("file", "local")

    def path(self, *parts: str) -> str:
        """Filesystem path (without protocol) of ``parts`` below the root."""
        return posixpath.join(self.root, *parts)

    def uri(self, *parts: str) -> str:
        """Full URL, usable by duckdb/pandas/fsspec outside this process."""
        p = self.path(*parts)
        return p if self.is_local else f"{self.protocol}://{p}"

    def rel(self, path: str) -> str:
        path = path.split("://", 1)[-1]
        return posixpath.relpath(path, self.root)

    # -- reading -----------------------------------------------------------------------------
    def exists(self, *parts: str) -> bool:
        return self.fs.exists(self.path(*parts))

    def read_bytes(self, *parts: str) -> bytes:
        return self.fs.cat_file(self.path(*parts))

    def read_text(self, *parts: str) -> str:
        return self.read_bytes(*parts).decode("utf-8")

    def glob(self, *parts: str) -> list[str]:
        """Sorted matches, hidden (dot) files excluded; returns filesystem paths."""
        hits = self.fs.glob(self.path(*parts))
        return sorted(h for h in hits if not posixpath.basename(h).startswith("."))

    def open(self, path: str, mode: str = "rb"):
        return self.fs.open(path, mode)

    # -- writing -----------------------------------------------------------------------------
    def write_bytes(self, rel_path: str, data: bytes) -> str:
        """Atomically create or replace ``rel_path``; returns its full path."""
        final = self.path(rel_path)
        parent = posixpath.dirname(final)
        if self.protocol in _OBJECT_STORE_PROTOCOLS:
            self.fs.pipe_file(final, data)
            return final
        self.fs.makedirs(parent, exist_ok=True)
        tmp = posixpath.join(parent, f".{posixpath.basename(final)}.{uuid.uuid4().hex}.tmp")
        if self.is_local:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
        else:
            self.fs.pipe_file(tmp, data)
            self.fs.mv(tmp, final)
        return final

    def write_text(self, rel_path: str, text: str) -> str:
        return self.write_bytes(rel_path, text.encode("utf-8"))

    def put_file(self, local_path: str, rel_path: str) -> str:
        with open(local_path, "rb") as fh:
            return self.write_bytes(rel_path, fh.read())

    def remove(self, rel_path: str) -> None:
        path = self.path(rel_path)
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def local_file(self, uri: str) -> str:
        """A local path for a stored file named by a full URL (s3://bucket/key), an absolute path, or a path
        relative to the data root (downloaded once per worker when the root is remote)."""
        path = uri.split("://", 1)[1] if "://" in uri else uri
        if "://" not in uri and not posixpath.isabs(path):
            path = self.path(path)
        return self.local_copy(path)

    def local_dir(self, uri: str) -> str:
        """A local folder for a stored folder (a checkpoint), named like ``local_file``; a remote one is
        downloaded once per worker."""
        if "://" not in uri and (self.is_local or posixpath.isabs(uri)):
            return uri if posixpath.isabs(uri) else self.path(uri)
        path = uri.split("://", 1)[1] if "://" in uri else self.path(uri)
        local = os.path.join(tempfile.gettempdir(), "datamind-cache", stable_id(self.protocol, path))
        if not os.path.isdir(local):
            tmp = f"{local}.{uuid.uuid4().hex}.tmp"
            self.fs.get(path.rstrip("/") + "/", tmp + "/", recursive=True)
            os.replace(tmp, local)
        return local

    def local_copy(self, path: str) -> str:
        """A local filesystem path for ``path``; remote files are downloaded once per worker.

        The copy keeps the file's own name (programs and sandboxes refer to data files by name),
        in a folder keyed by the remote path so two files of the same name never collide.
        """
        if self.is_local:
            return path
        folder = os.path.join(tempfile.gettempdir(), "datamind-cache", stable_id(self.protocol, path))
        local = os.path.join(folder, posixpath.basename(path))
        if not os.path.exists(local):
            os.makedirs(folder, exist_ok=True)
            tmp = f"{local}.{uuid.uuid4().hex}.tmp"
            self.fs.get_file(path, tmp)
            os.replace(tmp, local)
        return local


class ScratchRoot(DataRoot):
    """A data root read as it is and written nowhere: a dry run's writes stay in memory and vanish with it
    (batch mode's collecting passes, ``datamind.llm.batch``)."""

    def __init__(self, base: DataRoot) -> None:
        super().__init__(base.url)
        self.written: dict[str, bytes | None] = {}  # rel path -> bytes, None once removed

    def exists(self, *parts: str) -> bool:
        rel = posixpath.join(*parts)
        return self.written[rel] is not None if rel in self.written else super().exists(*parts)

    def read_bytes(self, *parts: str) -> bytes:
        rel = posixpath.join(*parts)
        if rel in self.written:
            if self.written[rel] is None:
                raise FileNotFoundError(self.path(rel))
            return self.written[rel]
        return super().read_bytes(*parts)

    def write_bytes(self, rel_path: str, data: bytes) -> str:
        self.written[rel_path] = bytes(data)
        return self.path(rel_path)

    def remove(self, rel_path: str) -> None:
        self.written[rel_path] = None
