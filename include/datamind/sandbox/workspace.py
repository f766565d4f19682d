"""Per-trajectory working directory: private copies of the data files, read-only, removed afterwards.

Copies (not hard links) keep the original safe: a hard link shares the inode, so a chmod or an
in-place write through the link would reach the data root. As root the directory is owned by root,
group = the trajectory's private gid, mode 1770: the cell can create files, but the sticky bit stops it
deleting or replacing the root-owned inputs. Under a user namespace it owns everything, so inputs are
verified and restored before every cell instead.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Workspace:
    path: Path
    inputs: dict[str, str] = field(default_factory=dict)  # name in the workspace -> source path
    _stamps: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)  # ino, size, mtime, mode

    @classmethod
    def create(cls, parent: str | os.PathLike, data_files: list[str], *, gid: int | None) -> "Workspace":
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
            if os.path.lexists(dst):
                if os.path.isdir(dst) and not os.path.islink(dst):
                    shutil.rmtree(dst, onerror=_force_remove)
                else:
                    os.unlink(dst)
            tmp = self.path / f".{name}.copying"
            shutil.copyfile(src, tmp)
            os.chmod(tmp, 0o444)
            os.replace(tmp, dst)
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


def _stamp(path: Path) -> tuple[int, int, int, int]:
    st = os.lstat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode


def _force_remove(func, path, _exc) -> None:  # noqa: ANN001 - shutil.rmtree onerror signature
    """A cell may leave a mode-000 directory behind; make it removable and try again."""
    try:
        os.chmod(os.path.dirname(path), 0o700)
        os.chmod(path, 0o700)
    except OSError:
        pass
    func(path)
