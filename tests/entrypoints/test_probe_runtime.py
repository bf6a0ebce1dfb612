"""The shared runtime's pure parts: node lists, launcher detection, backend choice, formatting."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import _probe_runtime as rt
import pytest

from tests.entrypoints.procs import ENTRYPOINTS, PYTHON, clean_env


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("node01", ["node01"]),
        ("node[01-03,7],gpu-a[1-2]", ["node01", "node02", "node03", "node7", "gpu-a1", "gpu-a2"]),
        ("a,b,c", ["a", "b", "c"]),
        ("p4d-st-p4d-[1-2]", ["p4d-st-p4d-1", "p4d-st-p4d-2"]),
        ("node[008-011]", ["node008", "node009", "node010", "node011"]),
        ("node[9-10]", ["node9", "node10"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("ip-10-0-1-5,ip-10-0-1-[6,9]", ["ip-10-0-1-5", "ip-10-0-1-6", "ip-10-0-1-9"]),
    ],
)
def test_expand_nodelist(nodelist: str, hosts: list[str]) -> None:
    assert rt.expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize("bad", ["node[1-2", "node1-2]", "node[3-1]", "node[a-b]"])
def test_expand_nodelist_rejects_malformed(bad: str) -> None:
    with pytest.raises(ValueError):
        rt.expand_nodelist(bad)


def test_expand_tasks_per_node() -> None:
    assert rt.expand_tasks_per_node("4(x2),3") == [4, 4, 3]
    assert rt.expand_tasks_per_node("8") == [8]
    with pytest.raises(ValueError):
        rt.expand_tasks_per_node("4(2)")


def test_torchrun_variables() -> None:
    env = {
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1",
        "MASTER_ADDR": "node1",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "abc",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "2",
    }
    info = rt.detect_launch(env)
    assert (
        info.launcher,
        info.rank,
        info.world_size,
        info.local_rank,
        info.local_world_size,
        info.group_rank,
    ) == ("torchrun", 5, 8, 1, 4, 1)
    assert (info.master_addr, info.master_port, info.agent_store) == ("node1", 29500, True)
    assert info.source.startswith("torchrun: RANK WORLD_SIZE")


def test_srun_variables_take_master_from_the_node_list() -> None:
    env = {
        "SLURM_PROCID": "9",
        "SLURM_NTASKS": "12",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "2",
        "SLURM_JOB_NODELIST": "gpu[003-005]",
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_ID": "123456",
        "SLURM_TASKS_PER_NODE": "4(x3)",
    }
    info = rt.detect_launch(env)
    assert (info.launcher, info.rank, info.world_size, info.local_rank, info.group_rank) == (
        "srun",
        9,
        12,
        1,
        2,
    )
    assert info.local_world_size == 4
    assert info.master_addr == "gpu003"
    assert info.master_port == 20000 + 123456 % 20000
    assert "MASTER_ADDR<-SLURM_JOB_NODELIST" in info.source and "MASTER_PORT<-SLURM_JOB_ID" in info.source


def test_srun_prefers_the_environment_and_the_step_node_list() -> None:
    base = {
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "2",
        "SLURM_STEP_ID": "1",
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "a[1-4]",
        "SLURM_STEP_NODELIST": "a[3-4]",
    }
    assert rt.detect_launch(base).master_addr == "a3"
    explicit = rt.detect_launch({**base, "MASTER_ADDR": "head", "MASTER_PORT": "1234"})
    assert (explicit.master_addr, explicit.master_port) == ("head", 1234)


def test_srun_without_step_notes_the_missing_srun() -> None:
    info = rt.detect_launch({"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "n1"})
    assert any("srun" in note for note in info.notes)


def test_mpirun_variables_need_master_addr() -> None:
    env = {
        "OMPI_COMM_WORLD_RANK": "3",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "1",
    }
    with pytest.raises(rt.LaunchError, match="MASTER_ADDR is not set"):
        rt.detect_launch(env)
    info = rt.detect_launch({**env, "MASTER_ADDR": "10.0.0.1"})
    assert (info.launcher, info.rank, info.world_size, info.local_rank, info.local_world_size) == (
        "mpirun",
        3,
        4,
        1,
        2,
    )
    assert info.group_rank is None  # MPI does not say; ddp_check derives it from the hosts
    assert info.master_port == rt.MPI_DEFAULT_PORT


def test_pmi_variables() -> None:
    info = rt.detect_launch(
        {
            "PMI_RANK": "1",
            "PMI_SIZE": "2",
            "MPI_LOCALRANKID": "1",
            "MPI_LOCALNRANKS": "2",
            "MASTER_ADDR": "h",
            "MASTER_PORT": "4000",
        }
    )
    assert (info.launcher, info.rank, info.world_size, info.local_rank, info.master_port) == (
        "mpirun",
        1,
        2,
        1,
        4000,
    )
    assert "PMI_RANK" in info.source


def test_no_launcher_is_one_process() -> None:
    info = rt.detect_launch({})
    assert (info.launcher, info.rank, info.world_size, info.local_rank) == ("single", 0, 1, 0)


@pytest.mark.parametrize(
    "env",
    [
        {"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "h"},
        {"RANK": "x", "WORLD_SIZE": "2", "MASTER_ADDR": "h"},
        {"RANK": "0", "WORLD_SIZE": "2"},
    ],
)
def test_inconsistent_launch_is_an_error(env: dict[str, str]) -> None:
    with pytest.raises(rt.LaunchError):
        rt.detect_launch(env)


def test_host_derived_positions() -> None:
    hosts = ["b", "b", "a", "a", "b"]
    assert rt.node_indices(hosts) == [0, 0, 1, 1, 0]
    assert rt.local_positions(hosts) == ([0, 1, 0, 1, 2], [3, 3, 2, 2, 3])


def test_backend_choice_on_cpu() -> None:
    assert rt.choose_backend_device("auto", "auto", 0)[0] == "gloo"
    assert str(rt.choose_backend_device("gloo", "cpu", None)[1]) == "cpu"
    with pytest.raises(rt.LaunchError, match="nccl"):
        rt.choose_backend_device("nccl", "cpu", 0)


def test_verdict_line_is_one_line() -> None:
    assert (
        rt.verdict_line("ddp_check", True, "world_size=4\n hosts=2")
        == "clusterprobe: ddp_check PASS world_size=4 hosts=2"
    )
    assert rt.verdict_line("comms_bench", False, "x").startswith("clusterprobe: comms_bench FAIL x")


def test_format_table_aligns() -> None:
    text = rt.format_table(("RANK", "HOST"), [(0, "node-long"), (10, "n")], indent="")
    assert text.splitlines() == ["RANK  HOST", "   0  node-long", "  10  n"]


def test_first_line_drops_gloo_source_location() -> None:
    exc = RuntimeError("[/__w/pytorch/third_party/gloo/pair.cc:537] Read error: Connection reset\nmore")
    assert rt.first_line(exc) == "Read error: Connection reset"


def test_watchdog_ends_a_stuck_process_with_a_message(tmp_path: Path) -> None:
    """The last resort: no progress for the timeout (+ grace) prints what was awaited and exits 3."""
    code = (
        "import time, _probe_runtime as rt\n"
        "dog = rt.Watchdog('ddp_check', 0, timeout=1.0)\n"
        "dog.expect('the all_reduce check with 8 ranks')\n"
        "time.sleep(60)\n"
    )
    env = clean_env(PYTHONPATH=str(ENTRYPOINTS))
    start = time.monotonic()
    done = subprocess.run(
        [PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == rt.EXIT_TIMEOUT, done
    assert time.monotonic() - start < 30
    assert (
        "[RANK 0] error: timeout: no progress for 2 s while the all_reduce check with 8 ranks" in done.stderr
    )
    assert done.stdout.splitlines()[-1].startswith("clusterprobe: ddp_check FAIL timeout: no progress")
