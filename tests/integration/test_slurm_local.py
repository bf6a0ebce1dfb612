"""Staged jobs on a real single-node Slurm (slurmctld + slurmd + munged on this host, tests/rig/slurm.py).

Host-runtime jobs really run: torchrun and the entrypoints with this checkout's Python, under srun.
Pyxis-mode jobs cannot run here (Enroot and Pyxis are not installable): Slurm judges their requests
with `sbatch --test-only`, and shellcheck their text. The .sqsh files they point at are placeholders
with the manifest `invoke squash` writes (tests/rig/staging.py); stage-jobs never reads their content.
The GPUs the rig declares are /dev/null stand-ins, only for --test-only of the GPU variants.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_invoke
from tests.rig.slurm import PARTITION, LocalSlurm
from tests.rig.staging import placeholder_squash, shellcheck

pytestmark = [pytest.mark.slurm]

QUICK = ("--epochs", "1", "--max-bytes", "64K", "--iters", "2", "--timeout", "60")


def _stage(slurm: LocalSlurm, out: Path, *args: str) -> list[dict[str, Any]]:
    result = run_invoke("stage-jobs", "--out", str(out), "--partition", PARTITION, "--json", *args,
                        env=slurm.env(), timeout=300)
    assert result.returncode == 0, result.stderr
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows


def _tail(path: Path, n: int = 2) -> list[str]:
    return path.read_text().rstrip("\n").splitlines()[-n:]


def test_sbatch_test_only_accepts_every_staged_file(slurm_local: LocalSlurm, tmp_path: Path) -> None:
    for variant in ("efa", "pytorch", "cpu"):
        placeholder_squash(tmp_path / "sq", variant)
    pyxis = _stage(slurm_local, tmp_path / "pyxis", "--squash-dir", str(tmp_path / "sq"), "--nodes", "1",
                   "--mount", "/fsx:/fsx", "--time", "00:10:00", "--account", "research")
    host = _stage(slurm_local, tmp_path / "host", "--runtime", "host", "--variant", "cpu", "--nodes", "1")
    scripts = [Path(row["script"]) for row in pyxis + host]
    assert len(scripts) == 8
    for script in scripts:
        answer = slurm_local.test_only(script)
        assert answer.returncode == 0 and "to start at" in answer.stderr, f"{script}: {answer.stderr}"
    checked = shellcheck(*scripts)
    assert checked.returncode == 0, checked.stdout

    # --test-only does judge: more GPUs than a node has, or more nodes than the cluster has, are refused.
    too_many = _stage(slurm_local, tmp_path / "too-many", "--squash-dir", str(tmp_path / "sq"),
                      "--variant", "efa", "--nodes", "1", "--gpus-per-node", "9")
    assert slurm_local.test_only(too_many[0]["script"]).returncode != 0
    assert slurm_local.test_only(pyxis[0]["script"], "--nodes", "2").returncode != 0


def test_host_runtime_jobs_run_to_completion(slurm_local: LocalSlurm, tmp_path: Path) -> None:
    out = tmp_path / "jobs"
    rows = _stage(slurm_local, out, "--runtime", "host", "--variant", "cpu", "--nodes", "1", *QUICK, "--submit")
    assert [r["job"] for r in rows] == ["ddp_check", "comms_bench"]
    assert all(r["job_id"] and r["job_id"].isdigit() for r in rows)
    for row in rows:
        info = slurm_local.wait(row["job_id"], timeout=240)
        log = out / "cpu" / "logs" / f"{row['job']}-{row['job_id']}.out"
        assert (info.state, info.exit_code) == ("COMPLETED", "0:0"), log.read_text()[-3000:]
        verdict, results = _tail(log)
        assert verdict.startswith(f"clusterprobe: job {row['job']} PASS exit_code=0 slurm_job_id={row['job_id']} "
                                  "nodes=1 variant=cpu runtime=host python=")
        result_path = out / "cpu" / "logs" / f"{row['job']}-{row['job_id']}.json"
        assert results == f"clusterprobe: results {result_path}"
        result = json.loads(result_path.read_text())
        assert result["verdict"] == "PASS" and result["exit_code"] == 0
        assert result["slurm_job_id"] == int(row["job_id"]) and result["nodes"] == 1
        assert result["head"] == slurm_local.nodes[0] and result["runtime"] == "host"
        assert f"clusterprobe: {row['job']} PASS" in log.read_text()  # rank 0's own verdict
        report = Path(result["report"])
        if row["job"] == "ddp_check":
            data = json.loads(report.read_text())
            assert data["ok"] is True and data["world_size"] == 2
            assert data["training"]["epochs"] == 1
            assert all(check["ok"] for check in data["checks"].values())
        else:
            lines = [json.loads(line) for line in report.read_text().splitlines()]
            assert {line["collective"] for line in lines} == {"all_reduce", "all_gather"}
            assert max(line["size_bytes"] for line in lines) <= 64 * 1024
            assert all(line["wrong"] == 0 and line["world_size"] == 2 for line in lines)


def test_a_failing_rank_fails_the_job(slurm_local: LocalSlurm, tmp_path: Path) -> None:
    """comms_bench fails when a collective's bus bandwidth is below --min-busbw: 1 PB/s is."""
    out = tmp_path / "jobs"
    rows = _stage(slurm_local, out, "--runtime", "host", "--variant", "cpu", "--nodes", "1", *QUICK,
                  "--min-busbw", "1000000")
    script = next(Path(r["script"]) for r in rows if r["job"] == "comms_bench")
    job_id = slurm_local.sbatch(script)
    info = slurm_local.wait(job_id, timeout=240)
    log = out / "cpu" / "logs" / f"comms_bench-{job_id}.out"
    assert info.state == "FAILED" and info.rc != 0, log.read_text()[-3000:]
    verdict, _ = _tail(log)
    assert verdict.startswith(f"clusterprobe: job comms_bench FAIL exit_code={info.rc} ")
    assert "clusterprobe: comms_bench FAIL" in log.read_text()
    result = json.loads((out / "cpu" / "logs" / f"comms_bench-{job_id}.json").read_text())
    assert result["verdict"] == "FAIL" and result["exit_code"] == info.rc


def test_submit_and_wait_reports_each_verdict(slurm_local: LocalSlurm, tmp_path: Path) -> None:
    """--wait follows the jobs through scontrol and reads their results: one passes, one fails on an
    unreachable --min-busbw, so the task exits 16 after printing both verdicts."""
    out = tmp_path / "jobs"
    result = run_invoke("stage-jobs", "--out", str(out), "--partition", PARTITION, "--json", "--runtime", "host",
                        "--variant", "cpu", "--nodes", "1", *QUICK, "--min-busbw", "1000000", "--submit",
                        "--wait", "--wait-timeout", "300", env=slurm_local.env(), timeout=400)
    assert result.returncode == 16, result.stderr
    rows = {row["job"]: row for row in json.loads(result.stdout)}
    assert rows["ddp_check"]["verdict"] == "PASS" and rows["ddp_check"]["state"] == "COMPLETED"
    assert rows["comms_bench"]["verdict"] == "FAIL" and rows["comms_bench"]["state"] == "FAILED"
    for row in rows.values():
        assert Path(row["results"]) == out / "cpu" / "logs" / f"{row['job']}-{row['job_id']}.json"
        assert json.loads(Path(row["results"]).read_text())["verdict"] == row["verdict"]
    assert "1 of 2 jobs did not pass: cpu/comms_bench" in result.stderr
    assert "Traceback" not in result.stderr


def test_wait_needs_submit(tmp_path: Path) -> None:
    result = run_invoke("stage-jobs", "--out", str(tmp_path), "--runtime", "host", "--variant", "cpu", "--wait")
    assert result.returncode == 2 and "--wait needs --submit" in result.stderr
    assert not (tmp_path / "cpu").exists()
