"""ddp_check.py in real processes on CPU: torchrun (2 and 4 ranks, two "nodes"), srun, mpirun, failures."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from tests.entrypoints.procs import (
    DDP_CHECK,
    HOST,
    PYTHON,
    TORCHRUN,
    Launch,
    Result,
    clean_env,
    free_port,
    mpirun_args,
    read_json,
    run_one,
    slurm_env,
    slurm_job_id,
    torchrun,
)

CHECKS = {
    "init",
    "topology",
    "all_reduce",
    "broadcast",
    "barrier",
    "ddp_training",
    "params_identical",
    "loss_decreased",
}
RANK_KEYS = {"rank", "local_rank", "group_rank", "local_world_size", "world_size", "host", "device", "source"}


def assert_passed(result: Result, world_size: int) -> None:
    assert result.returncode == 0, result.describe()
    verdicts = result.verdicts("ddp_check")
    assert len(verdicts) == 1, result.describe()
    assert verdicts[0] == result.last_plain_line(), "the verdict must end rank 0's output"
    assert verdicts[0].startswith(f"clusterprobe: ddp_check PASS world_size={world_size} "), verdicts[0]


def assert_report(report: dict[str, Any], world_size: int, launcher: str) -> None:
    assert report["ok"] is True and report["world_size"] == world_size
    assert [row["rank"] for row in report["ranks"]] == list(range(world_size))  # complete and sorted
    for row in report["ranks"]:
        assert set(row) == RANK_KEYS
        assert row["world_size"] == world_size and row["device"] == "cpu" and row["host"] == HOST
        assert row["source"].startswith(f"{launcher}: ")
    assert set(report["checks"]) == CHECKS
    assert all(check["ok"] and check["failed_ranks"] == [] for check in report["checks"].values())
    training = report["training"]
    assert training["params_identical"] is True
    assert training["loss_after"] < training["loss_before"]
    assert len(training["samples_per_s_per_rank"]) == world_size
    assert training["samples_per_s_total"] == sum(training["samples_per_s_per_rank"])
    assert all(rss > 0 for rss in training["peak_rss_bytes_per_rank"])
    assert report["versions"]["torch"]


def test_torchrun_two_ranks_the_image_smoke_command(launch: Launch, tmp_path: Path) -> None:
    report = tmp_path / "ddp.json"
    result = run_one(launch, torchrun(DDP_CHECK, "--epochs", "1", "--json", str(report)), timeout=120)
    assert_passed(result, 2)
    assert_report(read_json(report), 2, "torchrun")
    for rank in (0, 1):
        assert f"[RANK {rank}] Epoch 0 | Batchsize: 32 | Steps: 32" in result.stdout
        assert (
            f"[RANK {rank}] LOCAL_RANK={rank} RANK={rank} GROUP_RANK=0 LOCAL_WORLD_SIZE=2 WORLD_SIZE=2"
            in (result.stdout)
        )


def test_one_process_without_a_launcher(launch: Launch, tmp_path: Path) -> None:
    """`python entrypoints/ddp_check.py` straight from a checkout: a world of one, no network."""
    report = tmp_path / "ddp.json"
    result = run_one(launch, [PYTHON, DDP_CHECK, "--epochs", "1", "--json", str(report)], timeout=90)
    assert_passed(result, 1)
    assert_report(read_json(report), 1, "single")


def test_cuda_asked_for_where_there_is_none(launch: Launch) -> None:
    result = run_one(launch, [PYTHON, DDP_CHECK, "--device", "cuda"], timeout=60)
    assert result.returncode == 4, result.describe()
    assert result.last_plain_line().startswith(
        "clusterprobe: ddp_check FAIL --device cuda, but CUDA is not available"
    )


def test_torchrun_four_ranks(launch: Launch, tmp_path: Path) -> None:
    report = tmp_path / "ddp.json"
    args = ["--epochs", "2", "--batch-size", "16", "--samples-per-rank", "128", "--json", str(report)]
    result = run_one(launch, torchrun(DDP_CHECK, *args, nproc=4), timeout=180)
    assert_passed(result, 4)
    data = read_json(report)
    assert_report(data, 4, "torchrun")
    assert [row["local_rank"] for row in data["ranks"]] == [0, 1, 2, 3]
    assert data["training"]["steps_per_epoch"] == 8 and data["training"]["epochs"] == 2
    assert result.stdout.count("Epoch 1 | Batchsize: 16 | Steps: 8") == 4


def test_torchrun_two_nodes_on_loopback(launch: Launch, tmp_path: Path) -> None:
    """Two torchrun agents, as on two nodes, meeting through c10d rendezvous."""
    endpoint = f"127.0.0.1:{free_port()}"
    report = tmp_path / "ddp.json"
    for _ in range(2):
        launch.start(
            [
                TORCHRUN,
                "--nnodes=2",
                "--nproc_per_node=1",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint={endpoint}",
                "--rdzv-id=twonodes",
                "--max-restarts=0",
                DDP_CHECK,
                "--epochs",
                "1",
                "--json",
                str(report),
                "--timeout",
                "60",
            ]
        )
    results = launch.wait(timeout=150)
    assert all(r.returncode == 0 for r in results), "\n".join(r.describe() for r in results)
    assert sum(len(r.verdicts("ddp_check")) for r in results) == 1
    data = read_json(report)
    assert_report(data, 2, "torchrun")
    assert sorted(row["group_rank"] for row in data["ranks"]) == [0, 1]
    assert all(row["local_rank"] == 0 and row["local_world_size"] == 1 for row in data["ranks"])
    assert data["checks"]["topology"]["detail"] == "2 ranks, 2 nodes, 1 hosts"


def test_srun_without_torchrun(launch: Launch, tmp_path: Path) -> None:
    """SLURM_* as srun sets them; no MASTER_ADDR/PORT: rank 0's host from the node list, port from the job id.

    Also --profile, and a working directory that is not the checkout.
    """
    job = slurm_job_id()
    report, traces = tmp_path / "out" / "ddp.json", tmp_path / "traces"
    args = [
        PYTHON,
        DDP_CHECK,
        "--epochs",
        "1",
        "--json",
        str(report),
        "--profile",
        str(traces),
        "--timeout",
        "60",
    ]
    for rank in range(2):
        launch.start(args, slurm_env(rank, 2, job))
    rank0, rank1 = launch.wait(timeout=150)
    assert_passed(rank0, 2)
    assert rank1.returncode == 0 and not rank1.verdicts("ddp_check"), rank1.describe()
    assert all(line.startswith("[RANK 1] ") for line in rank1.stdout.splitlines() if line)
    data = read_json(report)
    assert_report(data, 2, "srun")
    assert "MASTER_ADDR<-SLURM_STEP_NODELIST" in data["ranks"][0]["source"]
    assert "MASTER_PORT<-SLURM_JOB_ID" in data["ranks"][0]["source"]
    assert f"at {HOST}:{20000 + job % 20000}" not in rank0.output  # no waiting message on success
    for rank in (0, 1):
        assert list(traces.glob(f"rank{rank}*.pt.trace.json")), sorted(traces.iterdir())


def test_mpirun_two_ranks(launch: Launch, tmp_path: Path) -> None:
    report = tmp_path / "ddp.json"
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    result = run_one(
        launch,
        mpirun_args(2, DDP_CHECK, "--epochs", "1", "--json", str(report), env=env),
        timeout=150,
        env=clean_env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"),
    )
    assert_passed(result, 2)
    data = read_json(report)
    assert_report(data, 2, "mpirun")
    assert "OMPI_COMM_WORLD_LOCAL_RANK" in data["ranks"][1]["source"]
    assert data["ranks"][1]["source"].endswith("(group_rank from hosts)")


def test_mpirun_without_master_addr_says_how_to_set_it(launch: Launch) -> None:
    result = run_one(
        launch,
        mpirun_args(2, DDP_CHECK, "--epochs", "1"),
        timeout=90,
        env=clean_env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"),
    )
    assert result.returncode != 0
    (verdict,) = result.verdicts("ddp_check")
    assert (
        verdict.startswith("clusterprobe: ddp_check FAIL mpirun: MASTER_ADDR is not set")
        and "-x MASTER_ADDR" in verdict
    )


def test_a_rank_that_never_joins_fails_within_the_timeout(launch: Launch, tmp_path: Path) -> None:
    job, report = slurm_job_id(), tmp_path / "ddp.json"
    args = [PYTHON, DDP_CHECK, "--timeout", "4", "--json", str(report)]
    for rank in (0, 2):  # rank 1 of 3 never starts
        launch.start(args, slurm_env(rank, 3, job))
    rank0, rank2 = launch.wait(timeout=60)
    port = 20000 + job % 20000
    for result in (rank0, rank2):
        assert result.returncode == 3, result.describe()
        assert result.seconds < 4 + 25, result.describe()  # the timeout, plus start-up on a busy machine
        assert f"waited 4 s for 1 of 3 ranks at {HOST}:{port} (missing ranks: 1)" in result.stderr
    assert rank0.last_plain_line().startswith("clusterprobe: ddp_check FAIL waited 4 s for 1 of 3 ranks")
    data = read_json(report)
    assert data["ok"] is False and data["checks"]["init"]["ok"] is False
    assert [row["rank"] for row in data["ranks"]] == [0]


def test_without_rank_0_the_store_is_waited_for(launch: Launch) -> None:
    result = run_one(
        launch, [PYTHON, DDP_CHECK, "--timeout", "3"], timeout=60, env=slurm_env(1, 2, slurm_job_id())
    )
    assert result.returncode == 3, result.describe()
    assert (
        "waited 3 s to reach the rendezvous store at" in result.stderr
        and "(hosted by rank 0)" in result.stderr
    )
    assert not result.verdicts("ddp_check")  # only rank 0 prints the verdict


def _start_pair(launch: Launch, timeout: str) -> None:
    job = slurm_job_id()
    args = [PYTHON, DDP_CHECK, "--epochs", "2000", "--samples-per-rank", "256", "--timeout", timeout]
    for rank in range(2):
        launch.start(args, slurm_env(rank, 2, job))
    launch.wait_for_output(1, "[RANK 1] Epoch 2 ", timeout=90)


def test_a_peer_that_dies_fails_the_others_at_once(launch: Launch) -> None:
    _start_pair(launch, timeout="30")
    killed = launch.signal(1, signal.SIGKILL)
    (rank0,) = launch.wait(timeout=60, indices=[0])
    assert rank0.returncode != 0, rank0.describe()
    assert time.monotonic() - killed < 30, "must not wait out the timeout when the peer is gone"
    assert rank0.last_plain_line().startswith("clusterprobe: ddp_check FAIL ddp_training failed on rank 0: ")
    assert "not run after that: params_identical, loss_decreased" in rank0.last_plain_line()


def test_a_peer_that_hangs_fails_the_others_within_the_timeout(launch: Launch) -> None:
    _start_pair(launch, timeout="6")
    stopped = launch.signal(1, signal.SIGSTOP)
    (rank0,) = launch.wait(timeout=60, indices=[0])
    waited = time.monotonic() - stopped
    assert rank0.returncode != 0, rank0.describe()
    assert 5 < waited < 6 + 20, waited
    verdict = rank0.last_plain_line()
    assert verdict.startswith("clusterprobe: ddp_check FAIL "), rank0.describe()
    assert "Timed out" in verdict or "no progress" in verdict
