"""Put a rendered folder of job files in place atomically, keeping what users keep there (logs/).

The new folder is written next to the target and swapped with it in one step (Linux renameat2
RENAME_EXCHANGE): a reader, sbatch or a user, sees the old folder or the new one, never a
half-written file. Then logs/ moves over as one rename (files that running jobs hold open stay
whole), and so do files we did not write. File systems without RENAME_EXCHANGE (NFS, Lustre) get
each file replaced atomically inside the existing folder instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from clusterprobe.errors import LockedError, StageError

LOGS = "logs"
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_NO_EXCHANGE = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV}


@dataclass(frozen=True)
class StagedFile:
    name: str  # a plain file name inside the folder
    text: str
    mode: int


def exchange_paths(a: Path, b: Path) -> None:
    """Swap two directories atomically; OSError (ENOSYS, EINVAL...) where that is not supported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError) as exc:
        raise OSError(errno.ENOSYS, "renameat2 is not available") from exc
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(a))


def _write_files(folder: Path, files: Sequence[StagedFile]) -> None:
    for staged in files:
        path = folder / staged.name
        path.write_text(staged.text)
        os.chmod(path, staged.mode)  # not left to the umask: others on the cluster read these
    (folder / LOGS).mkdir()
    os.chmod(folder / LOGS, 0o755)
    os.chmod(folder, 0o755)


def previous_files(folder: Path, record: str) -> set[str]:
    """The names an earlier run wrote there (the "files" list of its record), so only those are dropped."""
    try:
        data = json.loads((folder / record).read_text())
        return {str(name) for name in data.get("files", []) if "/" not in str(name)}
    except (OSError, ValueError, AttributeError):
        return set()


def _carry_over(old: Path, new: Path, ours: set[str]) -> list[str]:
    """Move logs/ and users' own files from the previous folder into the new one.

    logs/ goes as one rename onto the new, empty logs/; if a job created a file there meanwhile,
    the entries move one by one. Returns what could not move (its name is taken in the new folder).
    """
    left: list[str] = []
    old_logs, new_logs = old / LOGS, new / LOGS
    if old_logs.is_dir():
        try:
            os.rename(old_logs, new_logs)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            for entry in sorted(os.listdir(old_logs)):
                if (new_logs / entry).exists():
                    left.append(f"{LOGS}/{entry}")
                else:
                    os.rename(old_logs / entry, new_logs / entry)
    for entry in sorted(os.listdir(old)):
        if entry == LOGS or entry in ours:
            continue
        if (new / entry).exists():
            left.append(entry)
        else:
            os.rename(old / entry, new / entry)
    return left


def _replace_file_by_file(new: Path, target: Path, files: Sequence[StagedFile], record: str) -> None:
    """Without RENAME_EXCHANGE: each file replaced atomically in the existing folder, stale ones removed."""
    stale = previous_files(target, record) - {f.name for f in files}
    for staged in files:
        os.replace(new / staged.name, target / staged.name)
    for name in sorted(stale):
        with contextlib.suppress(FileNotFoundError):
            (target / name).unlink()
    (target / LOGS).mkdir(mode=0o755, exist_ok=True)
    os.chmod(target, 0o755)


@contextlib.contextmanager
def _lock(target: Path) -> Iterator[None]:
    lock = FileLock(str(target.parent / f".{target.name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise LockedError(f"another `invoke stage-jobs` is writing {target} right now",
                          fix="wait for it to finish, then run this again") from None
    try:
        yield
    finally:
        lock.release()


def replace_folder(target: Path, files: Sequence[StagedFile], *, record: str, exchange: bool = True) -> list[str]:
    """Make `target` hold exactly `files` (plus logs/ and users' files), atomically.

    `record` names the file among `files` that lists them (its "files" key), so that the next run
    knows which names are its own. Returns the paths of previous files that could not be carried
    over; they are kept aside in `.<name>.previous-<pid>` next to the target, never deleted.
    `exchange=False` takes the file-by-file way that file systems without RENAME_EXCHANGE get.
    """
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StageError(f"cannot create {parent}: {exc.strerror}", fix="choose another --out") from None
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise StageError(f"{target} exists and is not a folder", fix="move it away or choose another --out")
    with _lock(target):
        new = Path(tempfile.mkdtemp(prefix=f".{target.name}.staging-", dir=parent))
        keep = parent / f".{target.name}.previous-{os.getpid()}"
        swapped = False
        try:
            _write_files(new, files)
            if not target.exists():
                os.rename(new, target)
                return []
            if exchange:
                try:
                    exchange_paths(new, target)
                    swapped = True  # from here on `new` holds the previous folder, users' logs included
                except OSError as exc:
                    if exc.errno not in _NO_EXCHANGE:
                        raise
            if swapped:
                left = _carry_over(new, target, previous_files(new, record))
            else:
                _replace_file_by_file(new, target, files, record)
                left = []
        except OSError as exc:
            if swapped:
                os.rename(new, keep)
                raise StageError(f"staging {target} failed while moving logs/ over: {exc}",
                                 fix=f"the previous folder, logs included, is in {keep}; move what "
                                 "you need from there") from exc
            shutil.rmtree(new, ignore_errors=True)
            raise StageError(f"staging {target} failed: {exc}",
                             fix="check free space and permissions of --out") from exc
        if not left:
            shutil.rmtree(new, ignore_errors=True)
            return []
        os.rename(new, keep)
        return [str(keep / name) for name in left]
