"""`invoke squash` with the enroot backend, driven through a STAND-IN enroot.

Enroot cannot be installed here (not in Debian, not on PyPI), so these tests put
tests/standins/enroot first on PATH: a stand-in, not enroot, that records its arguments and
ENROOT_* environment, refuses existing outputs and digest references as enroot does, and really
converts the image (docker export | mksquashfs) so that the temporary name, the rename and the
manifest are exercised. What the files inside look like is enroot's business; the native backend
tests check ours.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, run_invoke

pytestmark = [pytest.mark.docker]

STANDINS = ROOT / "tests" / "standins"


@pytest.fixture
def standin_env(tmp_path: Path) -> dict[str, str]:
    """Environment with the stand-in enroot first on PATH and its record file."""
    return {"PATH": f"{STANDINS}{os.pathsep}{os.environ['PATH']}",
            "CLUSTERPROBE_ENROOT_STANDIN_RECORD": str(tmp_path / "enroot-calls.jsonl")}


def calls(env: dict[str, str]) -> list[dict[str, Any]]:
    record = Path(env["CLUSTERPROBE_ENROOT_STANDIN_RECORD"])
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def squash(repository: str, out: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_invoke("squash", "--json", "--variant", "cpu", "--repository", repository, "--out", str(out),
                      *args, env=env)


def test_auto_picks_enroot_and_renames_its_output(squash_test_image: tuple[str, str, str], tmp_path: Path,
                                                  standin_env: dict[str, str]) -> None:
    repository, versioned, image_id = squash_test_image
    out = tmp_path / "apps"
    result = squash(repository, out, standin_env)
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)  # enroot's log went to stderr: stdout is JSON alone
    assert (row["backend"], row["status"], row["image"], row["image_id"]) == ("enroot", "built", versioned, image_id)
    assert f"backend enroot (enroot found at {STANDINS}/enroot)" in result.stderr

    (call,) = calls(standin_env)
    sqsh = out / f"{repository}-cpu.sqsh"
    assert call["argv"][:2] == ["import", "-o"]
    temp = Path(call["argv"][2])
    assert temp.parent == out and temp.name.startswith(f".{sqsh.name}.tmp-")
    assert call["argv"][3] == f"dockerd://{image_id}"  # the exact image, never a tag that may move
    assert call["env"]["ENROOT_SQUASH_OPTIONS"] == "-comp zstd -Xcompression-level 3"
    assert not temp.exists()
    assert stat.S_IMODE(sqsh.stat().st_mode) == 0o644
    manifest = json.loads((out / f"{sqsh.name}.json").read_text())
    assert (manifest["backend"], manifest["sqsh"], manifest["size_bytes"]) == ("enroot", str(sqsh),
                                                                               sqsh.stat().st_size)
    assert "Compression zstd" in subprocess.run(["unsquashfs", "-s", str(sqsh)], capture_output=True, text=True,
                                                check=True).stdout

    again = squash(repository, out, standin_env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)[0]["status"] == "up-to-date"
    assert len(calls(standin_env)) == 1  # enroot not called for an up-to-date output


def test_users_enroot_squash_options_are_honoured_and_reported(squash_test_image: tuple[str, str, str],
                                                               tmp_path: Path, standin_env: dict[str, str]) -> None:
    repository, _, _ = squash_test_image
    env = {**standin_env, "ENROOT_SQUASH_OPTIONS": "-comp lz4", "ENROOT_MAX_PROCESSORS": "2"}
    result = squash(repository, tmp_path, env, "--backend", "enroot")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert (row["compression"], row["compression_source"]) == ("lz4", "ENROOT_SQUASH_OPTIONS")
    assert "ENROOT_SQUASH_OPTIONS=-comp lz4 from the environment" in result.stderr
    (call,) = calls(env)
    assert call["env"]["ENROOT_SQUASH_OPTIONS"] == "-comp lz4"  # inherited untouched
    assert call["env"]["ENROOT_MAX_PROCESSORS"] == "2"


def test_failed_import_keeps_the_old_file_and_leaves_no_temporary(squash_test_image: tuple[str, str, str],
                                                                  tmp_path: Path,
                                                                  standin_env: dict[str, str]) -> None:
    repository, _, _ = squash_test_image
    first = squash(repository, tmp_path, standin_env, "--compression", "lz4")
    assert first.returncode == 0, first.stderr
    sqsh = tmp_path / f"{repository}-cpu.sqsh"
    old = hashlib.sha256(sqsh.read_bytes()).hexdigest()
    old_manifest = (tmp_path / f"{sqsh.name}.json").read_text()

    failed = squash(repository, tmp_path, {**standin_env, "CLUSTERPROBE_ENROOT_STANDIN_FAIL": "1"},
                    "--compression", "lz4", "--force")
    assert failed.returncode == 11, failed.stderr
    assert "enroot import of cpu failed" in failed.stderr and "--backend native" in failed.stderr
    assert "Traceback" not in failed.stderr
    assert hashlib.sha256(sqsh.read_bytes()).hexdigest() == old
    assert (tmp_path / f"{sqsh.name}.json").read_text() == old_manifest
    assert list(tmp_path.glob(".*.tmp-*")) == []  # the stand-in's partial output was removed


def test_enroot_temp_path_without_room_fails_before_enroot_runs(squash_test_image: tuple[str, str, str],
                                                                tmp_path: Path, small_fs: Path,
                                                                standin_env: dict[str, str]) -> None:
    repository, _, _ = squash_test_image
    env = {**standin_env, "ENROOT_TEMP_PATH": str(small_fs)}
    result = squash(repository, tmp_path / "apps", env, "--backend", "enroot")
    assert result.returncode == 10, result.stderr
    assert f"enroot's unpacked image in {small_fs}" in result.stderr
    assert "set ENROOT_TEMP_PATH to a folder with room" in result.stderr
    assert calls(env) == []
    assert not (tmp_path / "apps").exists()


def test_standin_refuses_what_enroot_refuses(squash_test_image: tuple[str, str, str], tmp_path: Path,
                                             standin_env: dict[str, str]) -> None:
    """The stand-in's own contract, so the tests above can trust it."""
    existing = tmp_path / "existing.sqsh"
    existing.write_bytes(b"old")
    env = {**os.environ, **standin_env}
    enroot = str(STANDINS / "enroot")
    _, _, image_id = squash_test_image
    taken = subprocess.run([enroot, "import", "-o", str(existing), f"dockerd://{image_id}"], env=env,
                           capture_output=True, text=True, check=False)
    assert taken.returncode == 1 and f"File already exists: {existing}" in taken.stderr
    assert existing.read_bytes() == b"old"
    digest = subprocess.run([enroot, "import", "-o", str(tmp_path / "new.sqsh"),
                             "dockerd://clusterprobe@sha256:" + "0" * 64], env=env, capture_output=True,
                            text=True, check=False)
    assert digest.returncode == 1 and "Invalid image reference" in digest.stderr
    assert not (tmp_path / "new.sqsh").exists()
    assert [c["argv"][0] for c in calls(standin_env)] == ["import", "import"]
