"""`invoke disk` planning: sizes, per-variant needs, which folders --free would delete, and the
refusals that keep it from deleting a developer's toolchains. Real folders and a real `rm`; the
free space is given to the planner so that other processes writing to this disk do not matter
(tests/integration/test_publish_disk.py checks real free space on a tmpfs)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from clusterprobe import diskspace
from clusterprobe.diskspace import DiskPlan, GiB, Removable, Removal
from clusterprobe.errors import ConfigError, PreflightError
from clusterprobe.runner import Runner

MiB = 1024**2


@pytest.mark.parametrize(
    ("text", "expected"),
    [("40G", 40 * GiB), ("40GiB", 40 * GiB), ("40gb", 40 * GiB), ("512M", 512 * MiB), ("1.5T", 1536 * GiB),
     ("2048", 2048), (" 8 G ", 8 * GiB)],
)
def test_parse_size(text: str, expected: int) -> None:
    assert diskspace.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "G", "40x", "-1G", "forty"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="is not a size") as info:
        diskspace.parse_size(text)
    assert info.value.fix and "--need 40G" in info.value.fix


def test_variant_needs_add_up() -> None:
    assert diskspace.variants_need(["cpu"]) == 8 * GiB
    assert diskspace.variants_need(["efa", "cpu"]) == 48 * GiB
    assert diskspace.variants_need(["site-variant"]) == diskspace.DEFAULT_NEED
    assert diskspace.variants_need([]) == 0


def _folders(root: Path, *names: str) -> list[Removable]:
    out = []
    for name in names:
        (root / name).mkdir()
        out.append(Removable(root / name, name))
    return out


def test_plan_takes_the_shortest_prefix_and_sizes_lazily(tmp_path: Path) -> None:
    candidates = _folders(tmp_path, "android", "toolcache", "dotnet")
    sizes = {"android": 10 * GiB, "toolcache": 8 * GiB, "dotnet": 2 * GiB}
    sized: list[str] = []

    def size_of(path: Path) -> int:
        sized.append(path.name)
        return sizes[path.name]

    plan = diskspace.plan_free(tmp_path, 40 * GiB, candidates, size_of, free=22 * GiB)
    assert [r.removable.path.name for r in plan.removals] == ["android", "toolcache"]
    assert sized == ["android", "toolcache"]  # dotnet never measured: not needed
    assert plan.short == 18 * GiB and plan.freed == 18 * GiB


def test_plan_with_enough_space_deletes_nothing(tmp_path: Path) -> None:
    candidates = _folders(tmp_path, "android")
    plan = diskspace.plan_free(tmp_path, 8 * GiB, candidates, lambda p: pytest.fail("sized"), free=9 * GiB)
    assert plan.removals == () and plan.short == 0


def test_plan_skips_missing_folders_and_other_file_systems(tmp_path: Path) -> None:
    (present,) = _folders(tmp_path, "dotnet")
    candidates = [Removable(tmp_path / "not-here", "missing"), Removable(Path("/proc/self"), "procfs"), present]
    assert Path("/proc/self").lstat().st_dev != tmp_path.stat().st_dev
    plan = diskspace.plan_free(tmp_path, 10 * GiB, candidates, lambda p: 2 * GiB, free=9 * GiB)
    assert [r.removable for r in plan.removals] == [present]


def test_plan_that_cannot_reach_the_need_fails_before_deleting(tmp_path: Path) -> None:
    candidates = _folders(tmp_path, "android", "dotnet")
    with pytest.raises(PreflightError) as info:
        diskspace.plan_free(tmp_path, 60 * GiB, candidates, lambda p: 5 * GiB, free=20 * GiB)
    message = str(info.value)
    assert "20.0 GiB free and 60.0 GiB are needed" in message
    assert "would add only 10.0 GiB" in message and str(tmp_path / "android") in message
    assert "bigger disk" in message
    assert (tmp_path / "android").is_dir() and (tmp_path / "dotnet").is_dir()


def test_removal_command_uses_sudo_only_when_not_root() -> None:
    removal = Removal(Removable(Path("/usr/share/dotnet"), ".NET"), GiB)
    assert removal.command(as_root=True) == ["rm", "-rf", "--one-file-system", "/usr/share/dotnet"]
    assert removal.command(as_root=False) == ["sudo", "-n", "rm", "-rf", "--one-file-system", "/usr/share/dotnet"]


def test_default_list_is_refused_off_github_hosted_runners(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (victim,) = _folders(tmp_path, "toolchain")
    (victim.path / "file").write_bytes(b"x" * 1000)
    plan = DiskPlan(path=tmp_path, free=1 * GiB, need=2 * GiB, removals=(Removal(victim, GiB),))
    monkeypatch.delenv("RUNNER_ENVIRONMENT", raising=False)
    with pytest.raises(PreflightError, match="only done on a GitHub-hosted runner") as info:
        diskspace.execute_free(Runner(echo=lambda _: None), plan, default_list=True)
    assert info.value.fix and "--remove DIR" in info.value.fix
    assert victim.path.is_dir()

    lines: list[str] = []
    assert diskspace.execute_free(Runner(dry_run=True, echo=lines.append), plan, default_list=True) == 2 * GiB
    assert f"+ rm -rf --one-file-system {victim.path}" in lines and victim.path.is_dir()

    monkeypatch.setenv("RUNNER_ENVIRONMENT", "github-hosted")
    diskspace.execute_free(Runner(echo=lines.append), plan, default_list=True)
    assert not victim.path.exists()


def test_folders_this_run_needs_are_refused(tmp_path: Path) -> None:
    data_root = tmp_path / "docker"
    data_root.mkdir()
    for bad in (tmp_path, data_root, Path.cwd(), Path(sys.prefix), Path(sys.base_prefix), Path("/")):
        with pytest.raises(ConfigError, match="which this run needs"):
            diskspace.removables([str(bad)], data_root=data_root)
    with pytest.raises(ConfigError, match="absolute path"):
        diskspace.removables(["usr/share/dotnet"], data_root=data_root)
    other = tmp_path / "other"
    assert diskspace.removables([str(other)], data_root=data_root) == [Removable(other, "named with --remove")]


def test_default_list_leaves_out_toolchains_this_run_needs() -> None:
    """A venv made from a tool-cache Python (/opt/hostedtoolcache/Python/...) keeps that cache."""
    everything = diskspace.removables([], data_root=Path("/var/lib/docker"))
    assert everything == list(diskspace.RUNNER_TOOLCHAINS)
    toolcache = Path("/opt/hostedtoolcache")
    assert diskspace.needed_inside(toolcache, data_root=toolcache / "docker") == toolcache / "docker"
    kept = diskspace.removables([], data_root=toolcache / "docker")
    assert [r.path for r in kept] == [t.path for t in diskspace.RUNNER_TOOLCHAINS if t.path != toolcache]


def test_report_row_for_people_and_programs(tmp_path: Path) -> None:
    plan = DiskPlan(path=tmp_path, free=10 * GiB, need=12 * GiB,
                    removals=(Removal(Removable(tmp_path / "a", "a"), 3 * GiB),))
    table_row = diskspace.report_row(plan, 13 * GiB, as_json=False)
    json_row = diskspace.report_row(plan, 13 * GiB, as_json=True)
    assert table_row["removed"] == str(tmp_path / "a") and json_row["removed"] == [str(tmp_path / "a")]
    assert json_row["freed_gib"] == 3.0 and json_row["status"] == "enough"
    assert diskspace.report_row(plan, 11 * GiB, as_json=True)["status"] == "short"
    with pytest.raises(PreflightError, match=r"still has only 11\.0 GiB free after deleting 1 folder"):
        diskspace.require_room(plan, 11 * GiB)
    diskspace.require_room(plan, 12 * GiB)
