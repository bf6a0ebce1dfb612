"""Which source revision an image is built from: the last commit that touched its inputs.

Using the inputs' last commit (not HEAD) keeps tags and image IDs stable across commits that
change only docs or tests, so an unchanged image is never rebuilt, re-squashed or re-pushed.
"""

from __future__ import annotations

import shutil
import subprocess  # noqa: TID251 - read-only git queries; no git is not an error here
from collections.abc import Sequence
from pathlib import Path

NO_GIT = "nogit"


def _git(cwd: Path, *args: str) -> str | None:
    if shutil.which("git") is None:
        return None
    proc = subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=False
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def revision(paths: Sequence[Path], length: int = 8) -> str:
    """Short hash of the last commit touching `paths`, plus '-dirty' if they have local changes."""
    if not paths:
        return NO_GIT
    cwd = paths[0] if paths[0].is_dir() else paths[0].parent
    top = _git(cwd, "rev-parse", "--show-toplevel")
    if not top:
        return NO_GIT
    rel = [str(p.resolve().relative_to(Path(top).resolve())) for p in paths]
    commit = _git(Path(top), "log", "-1", "--format=%H", "--", *rel)
    status = _git(Path(top), "status", "--porcelain", "--untracked-files=all", "--", *rel)
    if not commit:
        return NO_GIT + ("-dirty" if status else "")
    return commit[:length] + ("-dirty" if status else "")


def origin_url(path: Path) -> str | None:
    url = _git(path if path.is_dir() else path.parent, "config", "--get", "remote.origin.url")
    return url or None
