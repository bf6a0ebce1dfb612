"""`invoke squash` with the native backend on the real Docker engine and real squashfs-tools.

The cpu image (torch) is squashed once for this module and inspected with unsquashfs, then run
from a squashfuse mount the way enroot starts it (environment from /etc/environment, command
through /etc/rc). Everything that needs no torch uses the 265 MB squash test image.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusterprobe import squash
from tests.conftest import ROOT, run_invoke

pytestmark = [pytest.mark.docker]

ENROOT_FILES = ("etc/environment", "etc/rc", "etc/rc.local", "etc/fstab")


def squash_json(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], Any]:
    result = run_invoke("squash", "--json", *args, env=env)
    rows = json.loads(result.stdout) if result.returncode == 0 else None
    return result, rows


def unsquashfs_cat(sqsh: Path, path: str) -> str:
    return subprocess.run(["unsquashfs", "-cat", str(sqsh), path], capture_output=True, text=True,
                          check=True).stdout


def listing(sqsh: Path) -> list[str]:
    out = subprocess.run(["unsquashfs", "-l", str(sqsh)], capture_output=True, text=True, check=True).stdout
    return [line.removeprefix("squashfs-root") for line in out.splitlines() if line.startswith("squashfs-root")]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def export_containers(docker_client: Any, sqsh: Path) -> list[Any]:
    return docker_client.containers.list(all=True, filters={"label": f"{squash.CONTAINER_LABEL}={sqsh}"})


@pytest.fixture(scope="module")
def cpu_squash(cpu_image: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("cpu-squash") / "apps"
    result, rows = squash_json("--variant", "cpu", "--out", str(out))
    assert result.returncode == 0, result.stderr
    (row,) = rows
    return out, row


@pytest.fixture(scope="module")
def small_squash(squash_test_image: tuple[str, str, str],
                 tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    repository, _, _ = squash_test_image
    out = tmp_path_factory.mktemp("small-squash")
    result, rows = squash_json("--variant", "cpu", "--repository", repository, "--out", str(out),
                               "--backend", "native")
    assert result.returncode == 0, result.stderr
    (row,) = rows
    return out, row


@pytest.mark.slow
def test_cpu_squash_holds_the_image_and_enroots_files(cpu_squash: tuple[Path, dict[str, Any]],
                                                      cpu_image: Any) -> None:
    out, row = cpu_squash
    sqsh = out / "clusterprobe-cpu.sqsh"
    manifest = json.loads((out / "clusterprobe-cpu.sqsh.json").read_text())
    assert row["status"] == "built"
    for key in ("variant", "image", "image_id", "sqsh", "backend", "compression", "size_bytes", "created"):
        assert manifest[key] == row[key], key
    assert manifest["variant"] == "cpu"
    assert manifest["image"] == cpu_image.tag and manifest["image"].startswith("clusterprobe:cpu-torch")
    assert manifest["image_id"] == cpu_image.image_id
    assert manifest["sqsh"] == str(sqsh) and Path(manifest["sqsh"]).is_absolute()
    assert (manifest["backend"], manifest["compression"]) == ("native", "zstd:3")
    assert manifest["size_bytes"] == sqsh.stat().st_size
    assert stat.S_IMODE(sqsh.stat().st_mode) == 0o644
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert "Compression zstd" in subprocess.run(["unsquashfs", "-s", str(sqsh)], capture_output=True,
                                                text=True, check=True).stdout

    files = listing(sqsh)
    for entrypoint in ("versions.py", "ddp_check.py", "comms_bench.py"):
        assert f"/opt/clusterprobe/{entrypoint}" in files
    assert "/.dockerenv" not in files
    assert [f for f in files if f.startswith("/dev/")] == []
    for path in ENROOT_FILES:
        assert f"/{path}" in files
    env = cpu_image_env(cpu_image)
    assert unsquashfs_cat(sqsh, "etc/environment") == "".join(f"{e}\n" for e in env)
    rc = unsquashfs_cat(sqsh, "etc/rc")
    assert 'cd "/" && unset OLDPWD || exit 1' in rc
    assert "    exec  'python' '/opt/clusterprobe/versions.py'\n" in rc
    assert "# io.clusterprobe.variant cpu\n" in rc
    assert unsquashfs_cat(sqsh, "etc/fstab") == ""  # the image has no volumes


def cpu_image_env(cpu_image: Any) -> list[str]:
    import docker

    client = docker.from_env()
    try:
        return list(client.images.get(cpu_image.image_id).attrs["Config"]["Env"])
    finally:
        client.close()


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Any]:
    """squashfuse mounts, unmounted after the test (what `enroot start x.sqsh` uses)."""
    mounts: list[Path] = []

    def mount(sqsh: Path) -> Path:
        point = tmp_path / f"mnt{len(mounts)}"
        point.mkdir()
        subprocess.run(["squashfuse", str(sqsh), str(point)], check=True)
        mounts.append(point)
        return point

    yield mount
    for point in mounts:
        subprocess.run(["umount", str(point)], check=False)


def run_like_enroot(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """What enroot does at start: the host's /dev and /proc mounted in, the environment from
    /etc/environment, then /etc/rc with the command line, inside the image's root (a private
    mount namespace and chroot stand in for enroot's namespaces)."""
    env = dict(line.split("=", 1) for line in (root / "etc/environment").read_text().splitlines() if line)
    inside = ('mount --rbind /dev "$0/dev" && mount -t proc proc "$0/proc" && '
              'exec chroot "$0" /bin/bash /etc/rc "$@"')
    unshare = shutil.which("unshare") or "unshare"
    argv = [unshare, "--mount", "--propagation", "private", "/bin/sh", "-c", inside, str(root), *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_cpu_squash_runs_torch_from_a_squashfuse_mount(cpu_squash: tuple[Path, dict[str, Any]],
                                                       mounted: Any) -> None:
    out, _ = cpu_squash
    root = mounted(out / "clusterprobe-cpu.sqsh")
    torch = run_like_enroot(root, "python", "-c", "import torch; print('torch', torch.__version__)")
    assert torch.returncode == 0, torch.stderr
    assert torch.stdout.strip().startswith("torch 2.13.0")
    bare = run_like_enroot(root)  # no arguments: the image's CMD, versions.py
    assert bare.returncode == 0, bare.stderr
    assert json.loads(bare.stdout)["torch"].startswith("2.13.0")


def test_image_config_becomes_enroot_files_that_run(small_squash: tuple[Path, dict[str, Any]],
                                                    squash_test_image: tuple[str, str, str], mounted: Any) -> None:
    _, row = small_squash
    _, versioned, image_id = squash_test_image
    assert (row["image"], row["image_id"], row["backend"]) == (versioned, image_id, "native")
    sqsh = Path(row["sqsh"])
    assert unsquashfs_cat(sqsh, "etc/environment") == (
        "PATH=/opt/tools/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
        "GREETING=it's a \"test\"\n")
    assert unsquashfs_cat(sqsh, "etc/fstab") == (
        "${ENROOT_ROOTFS}/data /data none x-create=dir,bind,rw,nosuid,nodev\n"
        "${ENROOT_ROOTFS}/scratch /scratch none x-create=dir,bind,rw,nosuid,nodev\n")
    rc = unsquashfs_cat(sqsh, "etc/rc")
    assert rc.startswith("# org.example.purpose squash tests\n\n")
    assert "    exec '/bin/sh' '-c' \"$@\"\n" in rc
    root = mounted(sqsh)
    assert "/work/dir" in listing(sqsh)
    cmd = run_like_enroot(root)
    assert (cmd.returncode, cmd.stdout) == (0, "cmd ran in /work/dir\n"), cmd.stderr
    args = run_like_enroot(root, 'echo "$GREETING" from $(pwd)')
    assert (args.returncode, args.stdout) == (0, "it's a \"test\" from /work/dir\n"), args.stderr


def test_unchanged_image_is_skipped_and_changed_options_redo_it(small_squash: tuple[Path, dict[str, Any]],
                                                                squash_test_image: tuple[str, str, str],
                                                                tmp_path: Path) -> None:
    source, _ = small_squash
    repository, _, _ = squash_test_image
    out = tmp_path / "apps"
    shutil.copytree(source, out, symlinks=True)
    for manifest in out.glob("*.json"):  # the copy's manifest must name the copy
        data = json.loads(manifest.read_text())
        data["sqsh"] = str(out / Path(data["sqsh"]).name)
        manifest.write_text(json.dumps(data))
    sqsh = out / f"{repository}-cpu.sqsh"
    before = sqsh.stat()
    again, rows = squash_json("--variant", "cpu", "--repository", repository, "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert rows[0]["status"] == "up-to-date"
    assert "is up to date" in again.stderr
    assert sqsh.stat().st_ino == before.st_ino  # not even rewritten

    # ENROOT_SQUASH_OPTIONS from the user's environment is honoured, and a change of options
    # makes the output out of date.
    redo, rows = squash_json("--variant", "cpu", "--repository", repository, "--out", str(out),
                             env={"ENROOT_SQUASH_OPTIONS": "-comp gzip -Xcompression-level 1"})
    assert redo.returncode == 0, redo.stderr
    (row,) = rows
    assert (row["status"], row["compression"], row["compression_source"]) == (
        "built", "gzip:1", "ENROOT_SQUASH_OPTIONS")
    assert "from the environment" in redo.stderr
    assert "Compression gzip" in subprocess.run(["unsquashfs", "-s", str(sqsh)], capture_output=True,
                                                text=True, check=True).stdout
    assert sqsh.stat().st_ino != before.st_ino
    forced, rows = squash_json("--variant", "cpu", "--repository", repository, "--out", str(out), "--force",
                               "--compression", "lz4", env={"ENROOT_SQUASH_OPTIONS": "-comp gzip"})
    assert forced.returncode == 0, forced.stderr
    assert (rows[0]["status"], rows[0]["compression"]) == ("built", "lz4")
    assert "--compression overrides ENROOT_SQUASH_OPTIONS" in forced.stderr
    left = sorted(p.name for p in out.iterdir() if not p.name.endswith(".lock"))
    assert left == [f"{repository}-cpu.sqsh", f"{repository}-cpu.sqsh.json"]


def test_kill_9_mid_squash_keeps_the_old_file_and_the_next_run_cleans_up(
        small_squash: tuple[Path, dict[str, Any]], squash_test_image: tuple[str, str, str],
        tmp_path: Path, docker_client: Any) -> None:
    source, _ = small_squash
    repository, _, _ = squash_test_image
    out = tmp_path / "apps"
    out.mkdir()
    sqsh, manifest = out / f"{repository}-cpu.sqsh", out / f"{repository}-cpu.sqsh.json"
    shutil.copy(source / sqsh.name, sqsh)
    manifest.write_text((source / manifest.name).read_text())
    old_sqsh, old_manifest = sha256(sqsh), manifest.read_text()

    proc = subprocess.Popen([sys.executable, "-m", "invoke", "squash", "--variant", "cpu", "--repository",
                             repository, "--out", str(out), "--force"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(out.glob(f".{sqsh.name}.tmp-*")):
        assert proc.poll() is None, "the squash ended before it could be killed"
        assert time.monotonic() < deadline, "no temporary file appeared"
        time.sleep(0.02)
    time.sleep(0.05)  # into the stream
    assert proc.poll() is None, "the squash ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    assert sha256(sqsh) == old_sqsh
    assert manifest.read_text() == old_manifest
    assert len(export_containers(docker_client, sqsh)) == 1  # left by the killed run

    again, rows = squash_json("--variant", "cpu", "--repository", repository, "--out", str(out), "--force")
    assert again.returncode == 0, again.stderr
    assert rows[0]["status"] == "built"
    assert "left by an interrupted squash" in again.stderr
    assert export_containers(docker_client, sqsh) == []
    assert list(out.glob(".*.tmp-*")) == []
    assert json.loads(manifest.read_text())["size_bytes"] == sqsh.stat().st_size
    assert "/etc/rc" in listing(sqsh)


def hold_lock(paths: squash.SquashPaths, seconds: float) -> subprocess.Popen[str]:
    """Another process holding the output's lock for `seconds` (returns once it holds it)."""
    code = ("import sys, time; from pathlib import Path; from clusterprobe import squash\n"
            "paths = squash.SquashPaths(Path(sys.argv[1]), sys.argv[2])\n"
            "with squash.output_lock(paths, 0):\n"
            "    print('held', flush=True); time.sleep(float(sys.argv[3]))\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(paths.out_dir), paths.name, str(seconds)],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_concurrent_squash_of_the_same_output_is_refused_or_waits(
        small_squash: tuple[Path, dict[str, Any]], squash_test_image: tuple[str, str, str]) -> None:
    out, _ = small_squash
    repository, _, _ = squash_test_image
    paths = squash.squash_paths(out, repository, "cpu")
    before = sha256(paths.sqsh)
    holder = hold_lock(paths, 120)
    try:
        refused = run_invoke("squash", "--variant", "cpu", "--repository", repository, "--out", str(out),
                             "--force")
    finally:
        holder.kill()
        holder.wait()
    assert refused.returncode == 15, refused.stderr
    assert f"another squash of {paths.sqsh} is running" in refused.stderr
    assert "--wait SECONDS" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert sha256(paths.sqsh) == before

    holder = hold_lock(paths, 2)
    waited = run_invoke("squash", "--variant", "cpu", "--repository", repository, "--out", str(out),
                        "--force", "--wait", "60")
    holder.wait()
    assert waited.returncode == 0, waited.stderr
    assert "built" in waited.stdout


def test_too_little_space_fails_before_any_work(squash_test_image: tuple[str, str, str], small_fs: Path,
                                                docker_client: Any) -> None:
    repository, _, _ = squash_test_image
    out = small_fs / "apps"
    result = run_invoke("squash", "--variant", "cpu", "--repository", repository, "--out", str(out))
    assert result.returncode == 10, result.stderr
    assert "not enough free space on the file system of" in result.stderr
    assert "needed" in result.stderr and "MiB free" in result.stderr
    assert "fix: free space there, or pass --out" in result.stderr
    assert not out.exists()  # nothing written, not even the folder
    assert export_containers(docker_client, squash.squash_paths(out, repository, "cpu").sqsh) == []


def test_read_only_output_folder_is_refused(squash_test_image: tuple[str, str, str], small_fs: Path) -> None:
    repository, _, _ = squash_test_image
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    result = run_invoke("squash", "--variant", "cpu", "--repository", repository, "--out", str(small_fs / "apps"))
    assert result.returncode == 10, result.stderr
    assert "is not writable" in result.stderr


def test_dry_run_prints_the_commands_and_changes_nothing(squash_test_image: tuple[str, str, str],
                                                         tmp_path: Path) -> None:
    repository, _, image_id = squash_test_image
    out = tmp_path / "apps"
    result = run_invoke("squash", "--variant", "cpu", "--repository", repository, "--out", str(out), "--dry-run")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("+ docker create --name clusterprobe-squash-") and lines[0].endswith(image_id)
    assert lines[1].startswith("+ docker export ") and " | mksquashfs - " in lines[1]
    assert f"{out}/.{repository}-cpu.sqsh.tmp-" in lines[1]
    assert f"+ mv {out}/.{repository}-cpu.sqsh.tmp-XXXXXXXX {out}/{repository}-cpu.sqsh" in lines
    assert not out.exists()


def test_user_errors_say_what_to_do(squash_test_image: tuple[str, str, str], tmp_path: Path) -> None:
    repository, _, _ = squash_test_image
    missing = run_invoke("squash", "--variant", "cpu", "--repository", "clusterprobe-never-built",
                         "--out", str(tmp_path))
    assert missing.returncode == 10, missing.stderr
    assert "build it first: invoke build --variant cpu" in missing.stderr
    unknown = run_invoke("squash", "--variant", "cpuu", "--out", str(tmp_path))
    assert unknown.returncode == 2
    assert "did you mean 'cpu'?" in unknown.stderr
    bad = run_invoke("squash", "--variant", "cpu", "--compression", "zstd:99", "--out", str(tmp_path))
    assert bad.returncode == 2
    assert "zstd levels are 1-22" in bad.stderr
    backend = run_invoke("squash", "--variant", "cpu", "--repository", repository, "--backend", "enroot",
                         "--out", str(tmp_path), env={"PATH": os.defpath})
    assert backend.returncode == 3, backend.stderr
    assert "'enroot' was not found on PATH" in backend.stderr
    for result in (missing, unknown, bad, backend):
        assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_options_mksquashfs_rejects_fail_with_its_message_and_leave_nothing(
        squash_test_image: tuple[str, str, str], tmp_path: Path, docker_client: Any) -> None:
    repository, _, _ = squash_test_image
    result = run_invoke("squash", "--variant", "cpu", "--repository", repository, "--out", str(tmp_path),
                        env={"ENROOT_SQUASH_OPTIONS": "-comp nosuch"})
    assert result.returncode == 11, result.stderr
    assert 'Compressor "nosuch" is not supported' in result.stderr
    assert "fix: check the compression options" in result.stderr and "Traceback" not in result.stderr
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []
    assert export_containers(docker_client, squash.squash_paths(tmp_path, repository, "cpu").sqsh) == []
