"""Writing files that others read while we write: readers see the old content or the new, whole.

A temporary name in the same folder, fsync, the final mode, one rename, fsync of the folder.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(temp: Path, final: Path, mode: int = 0o644) -> None:
    """fsync `temp`, give it `mode`, rename it over `final` atomically, fsync the folder."""
    fd = os.open(temp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(temp, mode)
    os.replace(temp, final)
    fsync_dir(final.parent)


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace `path` with `text`; the temporary file never outlives a failure."""
    # `.<name>.tmp-<random>`: the pattern squash's cleanup of killed runs looks for.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp-")
    temp = Path(tmp)
    try:
        os.fchmod(fd, mode & 0o600)  # nobody else reads it before it is whole
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        publish(temp, path, mode)
    finally:
        temp.unlink(missing_ok=True)
