"""Real processes launched as users launch them, on CPU, for the entrypoint tests.

Every launch has a deadline: past it the whole process group is killed and the test fails with
the output so far, so a hang fails a test instead of the suite.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINTS = ROOT / "entrypoints"
PYTHON = sys.executable
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
DDP_CHECK = str(ENTRYPOINTS / "ddp_check.py")
COMMS_BENCH = str(ENTRYPOINTS / "comms_bench.py")
HOST = socket.gethostname()

# busbw = algbw x factor(world size): nccl-tests doc/PERFORMANCE.md, written out per collective
BUSBW_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}

# Anything a launcher sets; a test starts from none of them (the suite may itself run under Slurm).
_LAUNCH_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "TORCHELASTIC_", "MPI_LOCAL")
_LAUNCH_NAMES = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NCCL_TESTS_MIN_BW",
    "CUDA_VISIBLE_DEVICES",
}


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without launcher variables, on CPU, one thread per rank (2-core machine)."""
    env = {
        k: v for k, v in os.environ.items() if k not in _LAUNCH_NAMES and not k.startswith(_LAUNCH_PREFIXES)
    }
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONWARNINGS="ignore", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def free_port(low: int | None = None, high: int | None = None) -> int:
    """A port nobody listens on now: any, or the first free one in [low, high)."""
    if low is None or high is None:
        with socket.socket() as sock:
            sock.bind(("", 0))
            return int(sock.getsockname()[1])
    for port in range(low + os.getpid() % 997, high):
        with socket.socket() as sock:
            try:
                sock.bind(("", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in [{low}, {high})")


@dataclass
class Result:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def verdicts(self, script: str) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.startswith(f"clusterprobe: {script} ")]

    def last_plain_line(self) -> str:
        """The last stdout line not prefixed by a rank: rank 0's own last word."""
        plain = [line for line in self.stdout.splitlines() if line.strip() and not line.startswith("[RANK ")]
        return plain[-1] if plain else ""

    def describe(self) -> str:
        return (
            f"$ {' '.join(self.args)}\nexit {self.returncode} after {self.seconds:.1f} s\n"
            f"--- stdout ---\n{self.stdout[-6000:]}\n--- stderr ---\n{self.stderr[-6000:]}"
        )


class Launch:
    """Processes started together and waited for under one deadline."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[tuple[list[str], subprocess.Popen[bytes], Path, Path, float]] = []

    def start(
        self, args: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> int:
        """Start one process (output to files, so it can be read while it runs); its index."""
        index = len(self.procs)
        out, err = self.tmp_path / f"proc{index}.out", self.tmp_path / f"proc{index}.err"
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            proc = subprocess.Popen(
                list(args),
                stdout=stdout,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                env=dict(env or clean_env()),
                cwd=cwd or self.tmp_path,
                start_new_session=True,
            )
        self.procs.append((list(args), proc, out, err, time.monotonic()))
        return index

    def stdout_so_far(self, index: int) -> str:
        return self.procs[index][2].read_text(errors="replace")

    def wait_for_output(self, index: int, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.stdout_so_far(index):
            if time.monotonic() > deadline or self.procs[index][1].poll() is not None:
                self.kill_all()
                pytest.fail(f"{text!r} never appeared\n" + "\n".join(r.describe() for r in self.results()))
            time.sleep(0.1)

    def signal(self, index: int, sig: int) -> float:
        self.procs[index][1].send_signal(sig)
        return time.monotonic()

    def wait(self, timeout: float, indices: Sequence[int] | None = None) -> list[Result]:
        """Wait for these processes (all by default); past the deadline kill everything and fail."""
        deadline = time.monotonic() + timeout
        for i in indices if indices is not None else range(len(self.procs)):
            try:
                self.procs[i][1].wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill_all()
                pytest.fail(
                    f"timed out after {timeout} s\n" + "\n".join(r.describe() for r in self.results())
                )
        return self.results(indices)

    def results(self, indices: Sequence[int] | None = None) -> list[Result]:
        picked = [self.procs[i] for i in (indices if indices is not None else range(len(self.procs)))]
        return [
            Result(
                args,
                proc.returncode if proc.returncode is not None else -999,
                out.read_text(errors="replace"),
                err.read_text(errors="replace"),
                time.monotonic() - started,
            )
            for args, proc, out, err, started in picked
        ]

    def kill_all(self) -> None:
        for _, proc, _, _, _ in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):  # its own session: the launcher and its ranks
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def run_one(
    launch: Launch, args: Sequence[str], timeout: float, env: Mapping[str, str] | None = None
) -> Result:
    launch.start(args, env)
    return launch.wait(timeout, [len(launch.procs) - 1])[0]


def argv(text: str) -> list[str]:
    """A command line written as one string, split as a shell would."""
    return shlex.split(text)


def torchrun(script: str, *args: str, nproc: int = 2) -> list[str]:
    return [TORCHRUN, "--standalone", f"--nproc_per_node={nproc}", script, *args]


def slurm_env(rank: int, ntasks: int, job_id: int, **extra: str) -> dict[str, str]:
    """What srun exports to task `rank` of a one-node step (MASTER_ADDR/PORT deliberately unset)."""
    return clean_env(
        SLURM_JOB_ID=str(job_id),
        SLURM_JOBID=str(job_id),
        SLURM_STEP_ID="0",
        SLURM_STEPID="0",
        SLURM_JOB_NODELIST=HOST,
        SLURM_NODELIST=HOST,
        SLURM_STEP_NODELIST=HOST,
        SLURM_NNODES="1",
        SLURM_JOB_NUM_NODES="1",
        SLURM_STEP_NUM_NODES="1",
        SLURM_NTASKS=str(ntasks),
        SLURM_NPROCS=str(ntasks),
        SLURM_STEP_NUM_TASKS=str(ntasks),
        SLURM_TASKS_PER_NODE=str(ntasks),
        SLURM_STEP_TASKS_PER_NODE=str(ntasks),
        SLURM_PROCID=str(rank),
        SLURM_LOCALID=str(rank),
        SLURM_NODEID="0",
        SLURMD_NODENAME=HOST,
        SLURM_GTIDS=",".join(map(str, range(ntasks))),
        SLURM_CPUS_ON_NODE="2",
        SLURM_LAUNCH_NODE_IPADDR="127.0.0.1",
        SLURM_SRUN_COMM_HOST="127.0.0.1",
        SLURM_TOPOLOGY_ADDR=HOST,
        SLURM_CLUSTER_NAME="test",
        **extra,
    )


def slurm_job_id() -> int:
    """A job id whose derived port (20000 + id % 20000) is free now."""
    return free_port(20000, 40000) - 20000


def mpirun_args(nproc: int, *args: str, env: Mapping[str, str] | None = None) -> list[str]:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun (Debian openmpi-bin) is not installed")
    exported = [item for name, value in (env or {}).items() for item in ("-x", f"{name}={value}")]
    return [
        mpirun,
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
        "-np",
        str(nproc),
        "-x",
        "OMP_NUM_THREADS",
        "-x",
        "PYTHONWARNINGS",
        "-x",
        "CUDA_VISIBLE_DEVICES",
        *exported,
        PYTHON,
        *args,
    ]


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
