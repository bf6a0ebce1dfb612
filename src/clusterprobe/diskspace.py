"""`invoke disk`: is there room on the Docker engine's data root for a build, and if not, make it.

DLC bases are 10+ GB compressed and about twice that unpacked; a GitHub-hosted runner starts with
roughly 14-20 GiB free on the file system that holds /var/lib/docker. With `--free` this deletes
the big preinstalled toolchains of those runners, largest first and only as many as the shortfall
needs (each one sized with `du` first, so `--dry-run` prints exactly the `rm` commands a real run
would execute), and fails before deleting anything when even all of them would not be enough.

Deleting toolchains is only right on a throwaway GitHub-hosted runner, so the default list is
refused anywhere else; `--remove DIR` names other folders a machine may lose instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterprobe.errors import ConfigError, PreflightError
from clusterprobe.output import human_bytes, parse_bytes, progress
from clusterprobe.runner import Runner

KiB = 1024
GiB = 1024**3

# Free space each variant needs on the Docker data root to pull its base, build, smoke-test and
# push (push adds nothing). efa: the DLC base is ~10 GB compressed, ~20 GB unpacked, and a pull
# holds compressed layers next to unpacked ones. pytorch: the CUDA runtime base, ~3.5 GB
# compressed, ~8 GB unpacked. cpu: `invoke local-base` (Debian rootfs, its tar and image, torch
# wheels) plus the 1.2 GB torch base. Variants a site adds get DEFAULT_NEED; `--need` overrides.
VARIANT_NEEDS: dict[str, int] = {"efa": 40 * GiB, "pytorch": 16 * GiB, "cpu": 8 * GiB}
DEFAULT_NEED = 16 * GiB


@dataclass(frozen=True)
class Removable:
    path: Path
    what: str


# What GitHub's Ubuntu runner images preinstall and a container build never uses, largest first
# (sizes vary between image versions; each one is measured before it is chosen). The tool cache
# holds only what setup-* actions would install: our workflows use the system python3.
RUNNER_TOOLCHAINS: tuple[Removable, ...] = (
    Removable(Path("/usr/local/lib/android"), "Android SDK (~10 GB)"),
    Removable(Path("/opt/hostedtoolcache"), "tool cache of the setup-* actions, CodeQL (~8 GB)"),
    Removable(Path("/opt/ghc"), "Haskell GHC (~5 GB)"),
    Removable(Path("/usr/local/.ghcup"), "Haskell ghcup (~5 GB)"),
    Removable(Path("/usr/share/dotnet"), ".NET SDK (~2 GB)"),
    Removable(Path("/usr/share/swift"), "Swift (~2 GB)"),
    Removable(Path("/usr/local/share/powershell"), "PowerShell (~1 GB)"),
    Removable(Path("/usr/local/share/chromium"), "Chromium (~0.5 GB)"),
    Removable(Path("/usr/local/share/boost"), "Boost"),
)



def parse_size(text: str) -> int:
    """'40G', '40GiB', '40GB', '512M', '1.5T', '1048576' -> bytes (all units are powers of 1024)."""
    size = parse_bytes("".join(text.split()), fractions=True)  # "8 G" is fine for --need
    if size is None:
        raise ConfigError(
            f"--need {text!r} is not a size",
            fix="write a number with an optional unit K, M, G or T (powers of 1024), e.g. --need 40G",
        )
    return size


def variants_need(names: Sequence[str]) -> int:
    """Images of several variants coexist on one engine, so their needs add up."""
    return sum(VARIANT_NEEDS.get(name, DEFAULT_NEED) for name in names)


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the file system that holds `path`."""
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def docker_root(info: dict[str, Any]) -> Path:
    """The engine's data root (`docker info`: DockerRootDir), which must be on this machine."""
    root = Path(str(info.get("DockerRootDir") or "/var/lib/docker"))
    if not root.is_dir():
        raise PreflightError(
            f"the Docker engine keeps its data in {root}, which is not a folder on this machine "
            f"(DOCKER_HOST={os.environ.get('DOCKER_HOST', 'unset')})",
            fix="run this on the engine's machine, or pass --path with the folder to check",
        )
    return root


def is_github_hosted() -> bool:
    return os.environ.get("RUNNER_ENVIRONMENT") == "github-hosted"


@dataclass(frozen=True)
class Removal:
    removable: Removable
    size: int

    def command(self, as_root: bool) -> list[str]:
        # --one-file-system: never follow a mount point out of the folder being deleted.
        argv = ["rm", "-rf", "--one-file-system", str(self.removable.path)]
        return argv if as_root else ["sudo", "-n", *argv]


@dataclass(frozen=True)
class DiskPlan:
    """Where the space is needed, how much there is, and what `--free` would delete for it."""

    path: Path
    free: int
    need: int
    removals: tuple[Removal, ...] = ()

    @property
    def short(self) -> int:
        return max(0, self.need - self.free)

    @property
    def freed(self) -> int:
        return sum(r.size for r in self.removals)


def removables(paths: Sequence[str], *, data_root: Path) -> list[Removable]:
    """The folders named with --remove (each checked), or else the GitHub runner toolchains,
    less any that hold something this run needs (e.g. a Python from the tool cache)."""
    if not paths:
        return [t for t in RUNNER_TOOLCHAINS if needed_inside(t.path, data_root) is None]
    named = [Removable(Path(p), "named with --remove") for p in paths]
    for candidate in named:
        if not candidate.path.is_absolute():
            raise ConfigError(f"--remove {candidate.path}: give an absolute path",
                              fix=f"e.g. --remove {Path('/') / candidate.path}")
        kept = needed_inside(candidate.path, data_root)
        if kept is not None:
            raise ConfigError(
                f"--remove {candidate.path} would delete {kept}, which this run needs",
                fix="name a folder that holds neither the Docker data root, nor this checkout, "
                "nor the Python running this",
            )
    return named


def needed_inside(folder: Path, data_root: Path) -> Path | None:
    """What `folder` holds that this run needs: the Docker data root, the current folder (the
    checkout), the Python environment and interpreter running us, this package; None if nothing."""
    resolved = folder.resolve()
    for kept in (data_root, Path.cwd(), Path(sys.prefix), Path(sys.base_prefix), Path(__file__).parent):
        kept_resolved = kept.resolve()
        if kept_resolved == resolved or resolved in kept_resolved.parents:
            return kept
    return None


def check_path(path: str) -> Path:
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"--path {path} is not a folder", fix="name an existing folder on the file system to check")
    return folder


def plan_free(
    path: Path,
    need: int,
    candidates: Sequence[Removable],
    size_of: Callable[[Path], int],
    *,
    free: int | None = None,
) -> DiskPlan:
    """The shortest prefix of `candidates` (those on `path`'s file system) that covers the shortfall.

    Candidates are sized lazily, in order, so a small shortfall costs one `du`. Raises
    PreflightError, before anything is deleted, when even all of them would not be enough.
    """
    free = free_bytes(path) if free is None else free
    plan = DiskPlan(path=path, free=free, need=need)
    if plan.short == 0:
        return plan
    device = path.stat().st_dev
    chosen: list[Removal] = []
    for candidate in candidates:
        try:
            if candidate.path.lstat().st_dev != device:
                continue  # another file system: deleting it frees nothing here
        except FileNotFoundError:
            continue
        chosen.append(Removal(candidate, size_of(candidate.path)))
        if free + sum(r.size for r in chosen) >= need:
            return DiskPlan(path=path, free=free, need=need, removals=tuple(chosen))
    possible = sum(r.size for r in chosen)
    listed = ", ".join(str(r.removable.path) for r in chosen) or "none of them is on this file system"
    raise PreflightError(
        f"{path} has {human_bytes(free)} free and {human_bytes(need)} are needed; deleting every "
        f"folder --free may delete would add only {human_bytes(possible)}: {listed}",
        fix="use a runner with a bigger disk, point Docker's data-root at a bigger file system, "
        "or name more folders with --remove DIR",
    )


def du_size(runner: Runner, path: Path) -> int:
    """Bytes under `path` on its own file system (`du -sxb`; unreadable corners count as 0)."""
    progress(f"sizing {path}")
    text = runner.output(["du", "-sxb", str(path)], check=False)
    words = text.split()
    return int(words[0]) if words and words[0].isdigit() else 0


def execute_free(runner: Runner, plan: DiskPlan, *, default_list: bool) -> int:
    """Delete the planned folders; returns the free bytes afterwards (the plan's estimate in dry-run).

    Raises PreflightError when the default toolchain list would be deleted anywhere but on a
    GitHub-hosted runner.
    """
    if not plan.removals:
        return plan.free
    if default_list and not runner.dry_run and not is_github_hosted():
        raise PreflightError(
            f"{plan.path} has {human_bytes(plan.free)} free and {human_bytes(plan.need)} are needed; "
            "--free would delete preinstalled toolchains, which is only done on a GitHub-hosted "
            "runner (RUNNER_ENVIRONMENT=github-hosted), and this machine is not one",
            fix="free space yourself (e.g. docker system prune), name folders that may go with "
            "--remove DIR, or see what it would delete with --dry-run",
        )
    as_root = os.geteuid() == 0
    for removal in plan.removals:
        progress(f"delete {removal.removable.path}: {removal.removable.what}, {human_bytes(removal.size)}")
        runner.run(removal.command(as_root))
    return plan.free + plan.freed if runner.dry_run else free_bytes(plan.path)


def require_room(plan: DiskPlan, free_after: int) -> None:
    """PreflightError unless `free_after` covers the need (checked after the report is printed)."""
    if free_after >= plan.need:
        return
    if plan.removals:
        raise PreflightError(
            f"{plan.path} still has only {human_bytes(free_after)} free after deleting "
            f"{len(plan.removals)} folder(s); {human_bytes(plan.need)} are needed",
            fix="use a runner with a bigger disk, or point Docker's data-root at a bigger file system",
        )
    raise PreflightError(
            f"{plan.path} has {human_bytes(free_after)} free and {human_bytes(plan.need)} are needed",
            fix="on a GitHub-hosted runner add --free; elsewhere free space (e.g. docker system prune) "
            "or point Docker's data-root at a bigger file system",
        )


def report_row(plan: DiskPlan, free_after: int, *, as_json: bool) -> dict[str, Any]:
    removed = [str(r.removable.path) for r in plan.removals]
    return {
        "path": str(plan.path),
        "free_gib": round(plan.free / GiB, 2),
        "need_gib": round(plan.need / GiB, 2),
        "freed_gib": round((free_after - plan.free) / GiB, 2) if plan.removals else 0.0,
        "free_after_gib": round(free_after / GiB, 2),
        "removed": removed if as_json else (" ".join(removed) or None),
        "status": "enough" if free_after >= plan.need else "short",
    }
