"""The squash plan and its safety parts without a Docker engine: names, backend choice, the
commands, up-to-date checks, preflight, atomic publishing, the lock, the tar entries mksquashfs
gets first (checked with real mksquashfs)."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from clusterprobe import squash
from clusterprobe.compression import choose_compression
from clusterprobe.errors import ConfigError, LockedError, PreflightError
from clusterprobe.rootfs import ImageConfig

IMAGE_ID = "sha256:" + "ab" * 32


def make_spec(out_dir: Path, *, backend: str = "native", size: int = 1000, env: dict[str, str] | None = None,
              enroot_temp: Path | None = None) -> squash.SquashSpec:
    source = squash.SourceImage(alias="clusterprobe:cpu", tag="clusterprobe:cpu-torch2.13.0-abc", image_id=IMAGE_ID,
                                size_bytes=size, config=ImageConfig(env=("A=1",), cmd=("true",)))
    return squash.SquashSpec("cpu", source, squash.squash_paths(out_dir, "clusterprobe", "cpu"), backend, "test",
                             choose_compression(None, env or {}), enroot_temp or out_dir)


def test_paths_follow_the_shared_names(tmp_path: Path) -> None:
    paths = squash.squash_paths(tmp_path, "clusterprobe", "efa")
    assert paths.sqsh == tmp_path / "clusterprobe-efa.sqsh"
    assert paths.manifest == tmp_path / "clusterprobe-efa.sqsh.json"
    assert paths.lock == tmp_path / ".clusterprobe-efa.sqsh.lock"
    temp = paths.temp(paths.sqsh)
    assert temp.parent == tmp_path and temp.name.startswith(".clusterprobe-efa.sqsh.tmp-")
    assert temp != paths.temp(paths.sqsh)  # fresh each time: enroot refuses an existing file
    relative = squash.squash_paths("rel", "org/clusterprobe", "cpu")
    assert relative.sqsh == Path.cwd() / "rel" / "org+clusterprobe-cpu.sqsh"


def test_backend_choice_says_why() -> None:
    assert squash.select_backend("auto", "/usr/bin/enroot") == ("enroot", "enroot found at /usr/bin/enroot")
    assert squash.select_backend("auto", None) == ("native", "enroot is not installed")
    assert squash.select_backend("native", "/usr/bin/enroot") == ("native", "--backend native")
    with pytest.raises(ConfigError, match="did you mean 'enroot'"):
        squash.select_backend("enrot", None)


def test_enroot_references_without_digests() -> None:
    squash.check_enroot_reference("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.9.0-gpu")
    squash.check_enroot_reference(IMAGE_ID)
    with pytest.raises(PreflightError, match="digest reference") as info:
        squash.check_enroot_reference("clusterprobe@sha256:" + "0" * 64)
    assert "tag or by image ID" in (info.value.fix or "")
    with pytest.raises(PreflightError, match="letters, digits"):
        squash.check_enroot_reference("clusterprobe:cpu latest")


def test_commands_of_both_backends(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    temp = tmp_path / ".t"
    assert spec.enroot_command(temp) == ["enroot", "import", "-o", str(temp), f"dockerd://{IMAGE_ID}"]
    assert spec.enroot_env() == {"ENROOT_SQUASH_OPTIONS": "-comp zstd -Xcompression-level 3"}
    argv = spec.mksquashfs_command(temp, 4)
    assert argv[:4] == ["mksquashfs", "-", str(temp), "-tar"]
    assert "-all-root" in argv and argv[argv.index("-root-mode") + 1] == "0755"
    assert argv[argv.index("-processors") + 1] == "4"
    assert argv[-4:] == ["-wildcards", "-e", "dev/*", ".dockerenv"]  # -e takes the rest of the line
    user = make_spec(tmp_path, env={"ENROOT_SQUASH_OPTIONS": "-comp xz"})
    assert user.enroot_env() == {}  # the user's own setting is inherited, not replaced
    assert user.mksquashfs_command(temp, 1)[-6:-4] == ["-comp", "xz"]


def _publish_output(spec: squash.SquashSpec, data: bytes = b"hsqs-data") -> None:
    spec.paths.sqsh.write_bytes(data)
    squash.write_manifest(spec.paths, {"variant": "cpu", "image_id": IMAGE_ID, "sqsh": str(spec.paths.sqsh),
                                       "mksquashfs_options": list(spec.compression.options), "size_bytes": len(data)})


def test_up_to_date_needs_same_image_variant_options_and_file(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    assert squash.up_to_date(spec) is None
    _publish_output(spec)
    assert squash.up_to_date(spec) is not None
    assert squash.up_to_date(make_spec(tmp_path, env={"ENROOT_SQUASH_OPTIONS": "-comp lz4"})) is None
    other = make_spec(tmp_path)
    assert other.source is not None
    changed = squash.SquashSpec("cpu", squash.SourceImage(other.source.alias, other.source.tag, "sha256:" + "cd" * 32,
                                                           1000, other.source.config),
                                other.paths, "native", "", other.compression, tmp_path)
    assert squash.up_to_date(changed) is None
    spec.paths.sqsh.write_bytes(b"hsqs-truncated-by-someone")  # size no longer matches the manifest
    assert squash.up_to_date(spec) is None
    spec.paths.manifest.write_text("{not json")
    assert squash.up_to_date(spec) is None


def test_preflight_reports_numbers_and_adds_up_same_file_system(tmp_path: Path) -> None:
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    squash.preflight([make_spec(tmp_path, size=free // 4)])
    with pytest.raises(PreflightError) as info:
        squash.preflight([make_spec(tmp_path / "a", size=free // 2), make_spec(tmp_path / "b", size=free // 2)])
    text = str(info.value)
    assert "not enough free space" in text and "needed" in text and "free" in text
    assert "cpu: clusterprobe-cpu.sqsh in" in text and "x 1.1" in text
    with pytest.raises(PreflightError, match="enroot's unpacked image") as enroot:
        squash.preflight([make_spec(tmp_path, backend="enroot", size=free // 2 + 1)])
    assert "ENROOT_TEMP_PATH" in (enroot.value.fix or "")


def test_preflight_rejects_a_file_as_output_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(PreflightError, match="is not a folder"):
        squash.preflight([make_spec(blocker / "sub")])


def test_published_files_are_world_readable_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        out = tmp_path / "new" / "apps"
        squash.make_output_dir(out)
        spec = make_spec(out)
        temp = spec.paths.temp(spec.paths.sqsh)
        temp.write_bytes(b"hsqs")
        squash.publish(temp, spec.paths.sqsh)
        squash.write_manifest(spec.paths, {"variant": "cpu"})
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o755 and stat.S_IMODE(out.parent.stat().st_mode) == 0o755
    assert stat.S_IMODE(spec.paths.sqsh.stat().st_mode) == 0o644
    assert stat.S_IMODE(spec.paths.manifest.stat().st_mode) == 0o644
    assert json.loads(spec.paths.manifest.read_text()) == {"variant": "cpu"}
    assert not temp.exists() and spec.paths.stale_temps() == []


def test_stale_temporary_files_are_removed_but_nothing_else(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    _publish_output(spec)
    stale = [tmp_path / ".clusterprobe-cpu.sqsh.tmp-dead", tmp_path / ".clusterprobe-cpu.sqsh.json.tmp-dead"]
    other = tmp_path / ".clusterprobe-efa.sqsh.tmp-live"  # another variant's run: not ours to remove
    for path in [*stale, other]:
        path.write_bytes(b"partial")
    assert spec.paths.stale_temps() == sorted(stale)
    squash.remove_leftovers(None, spec.paths)
    assert not any(p.exists() for p in stale)
    assert other.exists() and spec.paths.sqsh.exists() and spec.paths.manifest.exists()


def test_second_lock_fails_fast_or_after_waiting(tmp_path: Path) -> None:
    paths = make_spec(tmp_path).paths
    with squash.output_lock(paths, 0):
        with pytest.raises(LockedError, match="another squash of") as info, squash.output_lock(paths, 0):
            pass
        assert "--wait" in (info.value.fix or "")
        start = time.monotonic()
        with pytest.raises(LockedError, match=r"after waiting 0\.5 s"), squash.output_lock(paths, 0.5):
            pass
        assert time.monotonic() - start >= 0.5
    with squash.output_lock(paths, 0):  # released: free again
        pass


def test_rootfs_entries_win_over_the_image_files_in_real_mksquashfs(tmp_path: Path) -> None:
    """mksquashfs keeps the first of two tar entries with one name, and a later directory entry
    still sets the directory's metadata: what the native backend relies on."""
    prefix = squash.rootfs_tar_entries(ImageConfig(env=("FROM_CONFIG=1",), working_dir="/w"), time.time())
    assert len(prefix) % 512 == 0
    image_tar = io.BytesIO()
    with tarfile.open(fileobj=image_tar, mode="w") as tar:
        for name, kind in [("etc", tarfile.DIRTYPE), ("etc/environment", tarfile.REGTYPE),
                           ("etc/hostname", tarfile.REGTYPE), ("dev", tarfile.DIRTYPE),
                           ("dev/null", tarfile.REGTYPE), (".dockerenv", tarfile.REGTYPE)]:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = kind, 0o750 if kind == tarfile.DIRTYPE else 0o600, 86400
            data = b"FROM_IMAGE=1\n" if kind == tarfile.REGTYPE else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out = tmp_path / "out.sqsh"
    spec = make_spec(tmp_path)
    proc = subprocess.run(spec.mksquashfs_command(out, 1), input=prefix + image_tar.getvalue(),
                          capture_output=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    def cat(path: str) -> str:
        return subprocess.run(["unsquashfs", "-cat", str(out), path], capture_output=True, text=True,
                              check=True).stdout

    assert cat("etc/environment") == "FROM_CONFIG=1\n"
    assert cat("etc/hostname") == "FROM_IMAGE=1\n"
    assert 'cd "/w"' in cat("etc/rc")
    listing = subprocess.run(["unsquashfs", "-lls", str(out)], capture_output=True, text=True, check=True).stdout
    etc = next(line for line in listing.splitlines() if line.endswith("squashfs-root/etc"))
    assert etc.startswith("drwxr-x---") and "1970-01-02" in etc  # the image's etc/, not a made-up one
    assert "squashfs-root/dev/null" not in listing and ".dockerenv" not in listing
    assert "squashfs-root/dev" in listing
