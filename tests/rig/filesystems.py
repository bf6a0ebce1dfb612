"""A small real file system of known size (tmpfs): free-space tests need a disk whose free space
no other process changes while they run. Mounting needs root, as the rest of the rig does."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.rig.net import RigError


def mount_tmpfs(mountpoint: Path, size_bytes: int) -> None:
    if os.geteuid() != 0:
        raise RigError("mounting a tmpfs for the free-space tests needs root (run the tests as .ci/run does)")
    mount = shutil.which("mount")
    if mount is None:
        raise RigError("mount is not installed: apt-get install mount")
    mountpoint.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([mount, "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(mountpoint)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RigError(f"cannot mount a tmpfs on {mountpoint}: {proc.stderr.strip()}")


def unmount(mountpoint: Path) -> None:
    umount = shutil.which("umount") or "umount"
    subprocess.run([umount, str(mountpoint)], capture_output=True, check=False)
