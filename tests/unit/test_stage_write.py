"""Staging on a real file system: atomic replacement, logs/ and users' files kept, modes, locking.

Both ways are exercised: the whole-folder swap (renameat2 RENAME_EXCHANGE, as on local disks) and
the file-by-file replacement that file systems without it (NFS, Lustre) get (`exchange=False`).
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest
from filelock import FileLock

from clusterprobe import stage, stagedir
from clusterprobe.config import load_variants
from clusterprobe.errors import LockedError, StageError
from tests.conftest import ROOT

MODES = [pytest.param(True, id="exchange"), pytest.param(False, id="file-by-file")]


def _plan(out: Path, epochs: int = 1) -> stage.VariantStage:
    variant = load_variants(ROOT / "images" / "variants.yaml", region="us-east-1").get("cpu")
    options = stage.validate_options(out=out, squash_dir=out, repository="clusterprobe", runtime="host",
                                     python="/usr/bin/python3", epochs=epochs)
    (plan,) = stage.plan_stage([variant], options, {"cpu": None})
    return plan


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_first_stage_writes_files_modes_and_logs(tmp_path: Path) -> None:
    plan = _plan(tmp_path / "jobs")
    assert stage.write_stage(plan) == []
    folder = tmp_path / "jobs" / "cpu"
    assert sorted(p.name for p in folder.iterdir()) == ["comms_bench.sbatch", "ddp_check.sbatch", "logs",
                                                        "stage.json"]
    assert _mode(folder / "ddp_check.sbatch") == 0o755 and _mode(folder / "stage.json") == 0o644
    assert _mode(folder / "logs") == 0o755 and _mode(folder) == 0o755
    record = json.loads((folder / "stage.json").read_text())
    assert record["jobs"] == {"ddp_check": "ddp_check.sbatch", "comms_bench": "comms_bench.sbatch"}
    assert record["runtime"] == "host" and record["files"] == ["comms_bench.sbatch", "ddp_check.sbatch",
                                                               "stage.json"]
    leftovers = [p.name for p in (tmp_path / "jobs").iterdir() if p.name != "cpu"]
    assert leftovers == [".cpu.lock"]  # no half-written staging folder


@pytest.mark.parametrize("exchange", MODES)
def test_restage_replaces_scripts_and_keeps_logs_and_user_files(tmp_path: Path, exchange: bool) -> None:
    out = tmp_path / "jobs"
    stage.write_stage(_plan(out, epochs=1), exchange=exchange)
    folder = out / "cpu"
    (folder / "logs" / "ddp_check-7.json").write_text('{"verdict": "PASS"}\n')
    (folder / "notes.txt").write_text("mine\n")
    # a job staged earlier that this version no longer stages: ours, so it goes away
    (folder / "old_job.sbatch").write_text("#!/bin/bash\n")
    record = json.loads((folder / "stage.json").read_text())
    record["files"].append("old_job.sbatch")
    (folder / "stage.json").write_text(json.dumps(record))

    assert stage.write_stage(_plan(out, epochs=5), exchange=exchange) == []
    assert "--epochs 5" in (folder / "ddp_check.sbatch").read_text()
    assert (folder / "logs" / "ddp_check-7.json").read_text() == '{"verdict": "PASS"}\n'
    assert (folder / "notes.txt").read_text() == "mine\n"
    assert not (folder / "old_job.sbatch").exists()
    assert sorted(p.name for p in out.iterdir()) == [".cpu.lock", "cpu"]


@pytest.mark.parametrize("exchange", MODES)
def test_log_a_running_job_holds_open_stays_whole(tmp_path: Path, exchange: bool) -> None:
    """Slurm keeps a job's output file open while it runs; re-staging must not cut it off."""
    out = tmp_path / "jobs"
    stage.write_stage(_plan(out), exchange=exchange)
    log = out / "cpu" / "logs" / "ddp_check-9.out"
    with log.open("a") as running_job:
        running_job.write("before\n")
        running_job.flush()
        stage.write_stage(_plan(out, epochs=2), exchange=exchange)
        running_job.write("after\n")
    assert log.read_text() == "before\nafter\n"


@pytest.mark.parametrize("exchange", MODES)
def test_readers_never_see_a_half_written_script(tmp_path: Path, exchange: bool) -> None:
    out = tmp_path / "jobs"
    versions = [_plan(out, epochs=1), _plan(out, epochs=2)]
    texts = {next(f.text for f in p.files if f.name == "ddp_check.sbatch") for p in versions}
    stage.write_stage(versions[0], exchange=exchange)
    script = out / "cpu" / "ddp_check.sbatch"
    seen: list[str] = []
    bad: list[str] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                text = script.read_text()
            except FileNotFoundError:
                bad.append("missing")
                continue
            seen.append(text)
            if text not in texts:
                bad.append(text[-200:])

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(40):
            stage.write_stage(versions[i % 2], exchange=exchange)
    finally:
        done.set()
        reader.join()
    assert not bad, bad[:3]
    assert len(seen) > 40 and set(seen) == texts  # the reader did see both versions


def test_failed_write_leaves_the_previous_folder_untouched(tmp_path: Path) -> None:
    out = tmp_path / "jobs"
    plan = _plan(out)
    stage.write_stage(plan)
    before = {p.name: p.read_bytes() for p in (out / "cpu").iterdir() if p.is_file()}
    broken = stage.VariantStage(variant=plan.variant, folder=plan.folder, scripts=plan.scripts,
                                files=(*plan.files, stagedir.StagedFile("no/such/dir.sbatch", "x", 0o644)))
    with pytest.raises(StageError, match=r"staging .* failed"):
        stage.write_stage(broken)
    assert {p.name: p.read_bytes() for p in (out / "cpu").iterdir() if p.is_file()} == before
    assert sorted(p.name for p in out.iterdir()) == [".cpu.lock", "cpu"]


def test_a_second_stager_is_refused_while_one_runs(tmp_path: Path) -> None:
    out = tmp_path / "jobs"
    out.mkdir()
    with FileLock(str(out / ".cpu.lock")), pytest.raises(LockedError, match="right now"):
        stage.write_stage(_plan(out))
    assert not (out / "cpu").exists()


def test_a_file_where_the_folder_goes_is_refused(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "cpu").write_text("not a folder")
    with pytest.raises(StageError, match="is not a folder"):
        stage.write_stage(_plan(tmp_path / "jobs"))


def test_exchange_swaps_two_folders(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    (b / "x").write_text("b")
    ino_a = os.stat(a).st_ino
    stagedir.exchange_paths(a, b)
    assert (a / "x").read_text() == "b" and (b / "x").read_text() == "a"
    assert os.stat(b).st_ino == ino_a
