"""Per-trajectory working directory: private copies of the data files, read-only, removed afterwards.

Copies (not hard links) keep the original safe: a hard link shares the inode, so a chmod or an
in-place write through the link would reach the data root. As root the directory is owned by root,
group = the trajectory's private gid, mode 1770: the cell can create files, but the sticky bit stops it
deleting or replacing the root-owned inputs. Under a user namespace it owns everything, so inputs are
verified and restored before every cell instead.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Workspace:
    path: Path
    inputs: dict[str, str] = field(default_factory=dict)  # name in the workspace -> source path
    _stamps: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)  # ino, size, mtime, mode

    @classmethod
    def create(cls, parent: str | os.PathLike, data_files: list[str], *, gid: int | None) -> Workspace:
        names = [os.path.basename(f) for f in data_files]
        if len(set(names)) != len(names):
            raise ValueError(f"data files must have distinct base names, got {names}")
        for f in data_files:
            if not os.path.isfile(f):
                raise FileNotFoundError(f"data file not found: {f}")
        path = Path(tempfile.mkdtemp(prefix="traj-", dir=parent))
        ws = cls(path)
        try:
            if gid is not None:
                os.chown(path, 0, gid)
                os.chmod(path, 0o1770)
            else:
                os.chmod(path, 0o700)
            for src in data_files:
                ws.inputs[os.path.basename(src)] = os.path.abspath(src)
            ws.restore_inputs()
        except BaseException:
            ws.cleanup()
            raise
        return ws

    def restore_inputs(self) -> list[str]:
        """Re-copy any input that is missing or changed; returns the names restored."""
        restored = []
        for name, src in self.inputs.items():
            dst = self.path / name
            try:
                intact = _stamp(dst) == self._stamps.get(name)
            except FileNotFoundError:
                intact = False
            if intact:
                continue
            if os.path.lexists(dst) and stat.S_ISDIR(os.lstat(dst).st_mode):
                shutil.rmtree(dst, onerror=_force_remove)
            _copy_in(src, self.path, name)
            self._stamps[name] = _stamp(dst)
            restored.append(name)
        return restored

    def reset(self) -> None:
        """Back to the initial state (inputs only). Chunked mode calls this before each cell, so replaying
        the successful chunks recreates their files exactly and a replayed `os.mkdir` cannot fail."""
        for entry in os.scandir(self.path):
            if entry.name in self.inputs:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, onerror=_force_remove)
            else:
                os.unlink(entry.path)
        self.restore_inputs()

    def cleanup(self) -> None:
        if self.path.exists():
            shutil.rmtree(self.path, onerror=_force_remove)


def _copy_in(src: str, directory: Path, name: str) -> None:
    """Copy ``src`` to ``directory/name`` without following anything a cell planted there.

    The copy is written to a fresh, randomly named file created with O_EXCL|O_NOFOLLOW relative to a
    descriptor of the workspace (so neither a symlink at the temporary name nor a swapped path can
    redirect the write), made read-only through its descriptor, then renamed over ``name``: a rename
    replaces a planted symlink itself and never writes through it."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        tmp = f".{name}.{secrets.token_hex(8)}.copying"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        try:
            with open(src, "rb") as fin, os.fdopen(fd, "wb", closefd=False) as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
            os.fchmod(fd, 0o444)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def _stamp(path: Path) -> tuple[int, int, int, int, int]:
    # ctime too: a cell can restore size and mtime after rewriting an input in place, but not its ctime
    st = os.lstat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode


def _chmod_dir_nofollow(path: str) -> None:
    """chmod a real directory; a symlink (planted by a cell) is never followed to its target."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _force_remove(func, path, _exc) -> None:  # noqa: ANN001 - shutil.rmtree onerror signature
    """A cell may leave a mode-000 directory behind; make it removable and try again."""
    for p in (os.path.dirname(path), path):
        try:
            _chmod_dir_nofollow(p)
        except OSError:  # not a directory, or a link: nothing to open up
            pass
    func(path)
