"""Staged jobs across a real two-node Slurm cluster: node0 and node1 are containers of our cpu image
with slurmd added (tests/rig/slurm.py). Jobs are staged on this host into a folder both nodes mount
at the same path, submitted with `docker exec node0 sbatch`, and run the entrypoints with the
image's /opt/venv Python (--runtime host: the nodes' own Python). torchrun must rendezvous on node0.

Pyxis-mode scripts cannot run (no Enroot/Pyxis here): `sbatch --test-only` judges their two-node
requests; their .sqsh files are placeholders with squash's manifest (stage-jobs never reads the
content), and the rig's GPUs are /dev/null stand-ins that only --test-only sees.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_invoke
from tests.rig.slurm import PARTITION, ContainerSlurm
from tests.rig.staging import placeholder_squash

pytestmark = [pytest.mark.slurm, pytest.mark.docker, pytest.mark.slow]


def _stage(out: Path, *args: str) -> list[dict[str, Any]]:
    result = run_invoke("stage-jobs", "--out", str(out), "--partition", PARTITION, "--json", *args, timeout=300)
    assert result.returncode == 0, result.stderr
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows


def test_ddp_check_and_comms_bench_run_across_both_nodes(slurm_cluster: ContainerSlurm) -> None:
    out = slurm_cluster.shared / "jobs"
    rows = _stage(out, "--runtime", "host", "--variant", "cpu", "--nodes", "2", "--procs-per-node", "1",
                  "--python", "/opt/venv/bin/python", "--entrypoints", "/opt/clusterprobe",
                  "--epochs", "1", "--max-bytes", "64K", "--iters", "2", "--timeout", "90")
    submitted = [(row, slurm_cluster.sbatch(row["script"])) for row in rows]
    logs = out / "cpu" / "logs"
    for row, job_id in submitted:
        info = slurm_cluster.wait(job_id, timeout=300)
        log = logs / f"{row['job']}-{job_id}.out"
        assert (info.state, info.exit_code) == ("COMPLETED", "0:0"), log.read_text()[-3000:]
        assert info.fields["NodeList"] == "node[0-1]"
        result_path = logs / f"{row['job']}-{job_id}.json"
        verdict, results = log.read_text().rstrip("\n").splitlines()[-2:]
        assert verdict.startswith(f"clusterprobe: job {row['job']} PASS exit_code=0 slurm_job_id={job_id} nodes=2 ")
        assert results == f"clusterprobe: results {result_path}"
        result = json.loads(result_path.read_text())
        assert (result["verdict"], result["nodes"], result["nodelist"], result["head"]) == (
            "PASS", 2, "node[0-1]", "node0")
        assert f"rendezvous node0:{20000 + int(job_id) % 10000}" in log.read_text()
        report = Path(result["report"])
        if row["job"] == "ddp_check":
            data = json.loads(report.read_text())
            assert data["ok"] is True and data["world_size"] == 2
            assert sorted(rank["host"] for rank in data["ranks"]) == ["node0", "node1"]
        else:
            lines = [json.loads(line) for line in report.read_text().splitlines()]
            assert lines and all(line["world_size"] == 2 and line["wrong"] == 0 for line in lines)


def test_test_only_accepts_every_two_node_pyxis_file(slurm_cluster: ContainerSlurm) -> None:
    squash = slurm_cluster.shared / "sq"
    for variant in ("efa", "pytorch", "cpu"):
        placeholder_squash(squash, variant)
    rows = _stage(slurm_cluster.shared / "pyxis-jobs", "--squash-dir", str(squash), "--nodes", "2")
    assert len(rows) == 6
    for row in rows:
        answer = slurm_cluster.test_only(row["script"])
        assert answer.returncode == 0 and "node[0-1]" in answer.stderr, f"{row['script']}: {answer.stderr}"


def test_a_node_that_never_joins_fails_the_job_instead_of_hanging(slurm_cluster: ContainerSlurm) -> None:
    """node1's torchrun is replaced by a process that never joins (a hung node); node0's torchrun
    must give up after --timeout (join_timeout) and --kill-on-bad-exit must end node1's task."""
    shim = slurm_cluster.shared / "python-hangs-on-node1"
    shim.write_text('#!/bin/bash\nif [ "$(hostname)" = node1 ]; then exec sleep 600; fi\n'
                    'exec /opt/venv/bin/python "$@"\n')
    shim.chmod(0o755)
    rows = _stage(slurm_cluster.shared / "hang-jobs", "--runtime", "host", "--variant", "cpu", "--nodes", "2",
                  "--procs-per-node", "1", "--python", str(shim), "--entrypoints", "/opt/clusterprobe",
                  "--epochs", "1", "--timeout", "10")
    script = next(row["script"] for row in rows if row["job"] == "ddp_check")
    job_id = slurm_cluster.sbatch(script)
    info = slurm_cluster.wait(job_id, timeout=120)
    log = slurm_cluster.shared / "hang-jobs" / "cpu" / "logs" / f"ddp_check-{job_id}.out"
    text = log.read_text()
    assert info.state == "FAILED" and info.rc != 0, text[-3000:]
    assert "RendezvousTimeoutError" in text  # node0 gave up waiting; nothing else failed first
    verdict, _ = text.rstrip("\n").splitlines()[-2:]
    assert verdict.startswith(f"clusterprobe: job ddp_check FAIL exit_code={info.rc} ")
