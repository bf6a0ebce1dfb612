"""`invoke disk` on a real file system whose free space nothing else changes (a 64 MiB tmpfs from
the `small_fs` fixture): the report, --dry-run printing exactly the `rm` a real run executes, a
real run deleting only what the shortfall needs, and failing before deleting anything when even
all folders would not be enough. The Docker data root itself is what the publish workflow checks
(tests/integration/test_publish_workflow.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_invoke

MiB = 1024 * 1024


def _fill(small_fs: Path, **sizes_mib: int) -> dict[str, Path]:
    folders = {}
    for name, size in sizes_mib.items():
        folder = small_fs / name
        folder.mkdir()
        (folder / "blob").write_bytes(b"\0" * (size * MiB))
        folders[name] = folder
    return folders


def _disk(*args: str) -> tuple[int, str, str]:
    result = run_invoke("disk", *args, unset=("RUNNER_ENVIRONMENT",), timeout=120)
    return result.returncode, result.stdout, result.stderr


def test_report_and_shortage_without_free(small_fs: Path) -> None:
    _fill(small_fs, big=40)
    code, out, err = _disk("--path", str(small_fs), "--need", "8M", "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["path"] == str(small_fs) and row["status"] == "enough" and row["removed"] == []
    assert 0.01 < row["free_gib"] < 0.03  # 64 MiB less the 40 MiB blob

    code, out, err = _disk("--path", str(small_fs), "--need", "32M")
    assert code == 10
    assert "short" in out.splitlines()[-1]  # the table is printed before the error
    assert "are needed" in err and "fix:" in err and "--free" in err
    assert "Traceback" not in err


def test_free_deletes_only_what_the_shortfall_needs(small_fs: Path) -> None:
    folders = _fill(small_fs, first=24, second=24, keep=8)
    args = ["--path", str(small_fs), "--need", "24M", "--free",
            "--remove", str(folders["first"]), "--remove", str(folders["second"])]

    code, out, err = _disk(*args, "--dry-run")
    assert code == 0, err
    assert out.splitlines() == [f"+ rm -rf --one-file-system {folders['first']}"]
    assert folders["first"].is_dir()  # a dry run changes nothing

    code, out, err = _disk(*args, "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["removed"] == [str(folders["first"])] and row["status"] == "enough"
    assert row["free_after_gib"] * 1024 >= 24
    assert f"+ rm -rf --one-file-system {folders['first']}" in err
    assert not folders["first"].exists()
    assert folders["second"].is_dir() and folders["keep"].is_dir()


def test_free_fails_before_deleting_when_all_would_not_be_enough(small_fs: Path) -> None:
    folders = _fill(small_fs, first=24, second=24)
    code, _, err = _disk("--path", str(small_fs), "--need", "200M", "--free",
                         "--remove", str(folders["first"]), "--remove", str(folders["second"]))
    assert code == 10
    assert "would add only" in err and str(folders["second"]) in err
    assert folders["first"].is_dir() and folders["second"].is_dir()


@pytest.mark.docker
def test_default_path_is_the_docker_data_root(docker_client) -> None:  # type: ignore[no-untyped-def]
    code, out, err = _disk("--variant", "cpu", "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["path"] == docker_client.info()["DockerRootDir"]
    assert row["need_gib"] == 8.0


def test_bad_input_is_refused_clearly(small_fs: Path) -> None:
    for args, code, text in [
        (("--path", str(small_fs), "--need", "lots"), 2, "is not a size"),
        (("--path", str(small_fs / "nope")), 2, "is not a folder"),
        (("--path", str(small_fs), "--need", "1G", "--free", "--remove", "."), 2, "absolute path"),
        (("--path", str(small_fs), "--need", "1G", "--free", "--remove", str(small_fs)), 2, "which this run needs"),
        (("--variant", "efs"), 2, "did you mean 'efa'"),
    ]:
        result_code, _, err = _disk(*args)
        assert result_code == code, (args, err)
        assert text in err and "Traceback" not in err
