"""What ddp_check.py and comms_bench.py share: where a rank comes from, joining the group in time, reporting.

Standalone on purpose, like the scripts that import it: python + torch only. It is imported by
name from the scripts' own directory (/opt/clusterprobe in an image, entrypoints/ in a checkout).

- `detect_launch` reads rank and world from torchrun, Open MPI / PMI (mpirun) or srun variables.
- `join_process_group` connects to the rendezvous store and waits for every rank under one deadline,
  so a missing rank gives "waited 30 s for 2 of 4 ranks at host:port (missing ranks: 2, 3)" instead
  of a hang; the process group gets the same timeout for its collectives.
- `Watchdog` is the last resort: no progress for the timeout (plus a little grace) prints what the
  rank was waiting for and ends the process with EXIT_TIMEOUT.
- `run_probe` turns errors into the one verdict line (`clusterprobe: <script> PASS|FAIL ...`) and
  an exit code, the same way for both scripts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import math
import os
import re
import resource
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

try:
    import torch
    import torch.distributed as dist
except ImportError as _exc:  # the wrong python (a login node's system python, say): say so plainly
    sys.exit(f"clusterprobe: {sys.executable} cannot import torch ({_exc}); run this with the python "
             "of the image (e.g. under srun --container-image) or of a venv/conda env that has torch")

# torch.distributed re-exports the store classes without __all__, so type checkers cannot see
# them; these are the public names, typed loosely.
Store = Any
TCPStore: Any = getattr(dist, "TCPStore", None)
HashStore: Any = getattr(dist, "HashStore", None)
PrefixStore: Any = getattr(dist, "PrefixStore", None)

EXIT_OK = 0
EXIT_FAIL = 1  # a check failed or a result was wrong
EXIT_USAGE = 2  # argparse's own code for bad flags
EXIT_TIMEOUT = 3  # a rank never joined, or a peer stopped answering
EXIT_LAUNCH = 4  # the launch environment is incomplete or contradictory

# srun gives no port: derive one from the job id, so every rank of a job computes the same one.
SLURM_PORT_BASE = 20000
SLURM_PORT_SPAN = 20000
MPI_DEFAULT_PORT = 29500


class ProbeError(Exception):
    """A failure with a message meant for the job log; `exit_code` says which kind."""

    exit_code = EXIT_FAIL


class LaunchError(ProbeError):
    exit_code = EXIT_LAUNCH


class RendezvousTimeout(ProbeError):
    exit_code = EXIT_TIMEOUT


# ---------------------------------------------------------------------------------------------
# Slurm's compressed host lists


def _split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside brackets: 'a[1-2],b' -> ['a[1-2]', 'b']."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in {text!r}")
        if char == sep and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise ValueError(f"unbalanced '[' in {text!r}")
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def _expand_range(spec: str) -> list[str]:
    """'01-03' -> ['01', '02', '03'] (zero padding kept); '7' -> ['7']."""
    if "-" not in spec:
        return [spec]
    low, high = spec.split("-", 1)
    if not (low.isdigit() and high.isdigit()) or int(high) < int(low):
        raise ValueError(f"bad range {spec!r}")
    width = len(low) if low.startswith("0") else 0
    return [str(value).zfill(width) for value in range(int(low), int(high) + 1)]


def expand_nodelist(text: str) -> list[str]:
    """Expand a Slurm host list in pure Python, as `scontrol show hostnames` would.

    'node[01-03,7],gpu-a[1-2]' -> node01 node02 node03 node7 gpu-a1 gpu-a2; several bracket groups
    in one name ('r[1-2]n[1-2]') expand to their product. Images carry no scontrol.
    """
    hosts: list[str] = []
    for item in _split_top_level(text):
        expansions = [""]
        for match in re.finditer(r"([^\[]*)(?:\[([^\]]*)\])?", item):
            prefix, ranges = match.group(1), match.group(2)
            if not prefix and ranges is None:
                continue
            choices = [prefix]
            if ranges is not None:
                choices = [prefix + value for spec in ranges.split(",") for value in _expand_range(spec)]
            expansions = [head + choice for head in expansions for choice in choices]
        hosts.extend(expansions)
    return hosts


def expand_tasks_per_node(text: str) -> list[int]:
    """SLURM_TASKS_PER_NODE '4(x2),3' -> [4, 4, 3]."""
    counts: list[int] = []
    for item in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if not match:
            raise ValueError(f"bad tasks-per-node list {text!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def slurm_master_port(job_id: int) -> int:
    return SLURM_PORT_BASE + job_id % SLURM_PORT_SPAN


# ---------------------------------------------------------------------------------------------
# Where this rank's numbers come from


@dataclass(frozen=True)
class LaunchInfo:
    """One rank's place in the job, and which launcher variables said so."""

    launcher: str  # torchrun, env, mpirun, srun, single
    rank: int
    world_size: int
    local_rank: int | None
    local_world_size: int | None
    group_rank: int | None  # node index; None where the launcher does not say
    master_addr: str | None
    master_port: int | None
    variables: tuple[str, ...]
    run_id: str = "0"
    agent_store: bool = False  # torchrun's agent hosts the store; every rank is a client
    notes: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        return f"{self.launcher}: {' '.join(self.variables) or 'no launcher variables'}"


def _int_var(env: Mapping[str, str], name: str) -> int:
    value = env.get(name, "")
    try:
        return int(value)
    except ValueError:
        raise LaunchError(f"{name}={value!r} is not an integer") from None


def _optional_int(env: Mapping[str, str], *names: str) -> tuple[int | None, str | None]:
    for name in names:
        if env.get(name, "").strip():
            return _int_var(env, name), name
    return None, None


def _master_port(env: Mapping[str, str], default: int) -> tuple[int, str]:
    if env.get("MASTER_PORT"):
        return _int_var(env, "MASTER_PORT"), "MASTER_PORT"
    if env.get("SLURM_JOB_ID", "").isdigit():
        return slurm_master_port(int(env["SLURM_JOB_ID"])), "SLURM_JOB_ID"
    return default, "default"


def _from_torchrun(env: Mapping[str, str]) -> LaunchInfo:
    launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "env"
    local_rank, _ = _optional_int(env, "LOCAL_RANK")
    local_ws, _ = _optional_int(env, "LOCAL_WORLD_SIZE")
    group_rank, _ = _optional_int(env, "GROUP_RANK")
    names = [n for n in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK") if n in env]
    world_size = _int_var(env, "WORLD_SIZE")
    if world_size > 1 and not env.get("MASTER_ADDR"):
        raise LaunchError("RANK and WORLD_SIZE are set, MASTER_ADDR is not: launch with torchrun or set it")
    port, _ = _master_port(env, MPI_DEFAULT_PORT)
    run_id = f"{env.get('TORCHELASTIC_RUN_ID', 'env')}.{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return LaunchInfo(
        launcher=launcher,
        rank=_int_var(env, "RANK"),
        world_size=world_size,
        local_rank=0 if local_rank is None and world_size == 1 else local_rank,
        local_world_size=local_ws,
        group_rank=group_rank,
        master_addr=env.get("MASTER_ADDR"),
        master_port=port,
        variables=(*names, "MASTER_ADDR", "MASTER_PORT"),
        run_id=run_id,
        agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
    )


def _from_mpi(env: Mapping[str, str]) -> LaunchInfo:
    if "OMPI_COMM_WORLD_RANK" in env:
        rank_var, size_var = "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"
        local_rank, lr_var = _optional_int(env, "OMPI_COMM_WORLD_LOCAL_RANK")
        local_ws, lws_var = _optional_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE")
    else:  # MPICH, Intel MPI, MVAPICH (hydra) and srun --mpi=pmi2 export PMI_*
        rank_var, size_var = "PMI_RANK", "PMI_SIZE"
        local_rank, lr_var = _optional_int(env, "MPI_LOCALRANKID", "PMI_LOCAL_RANK")
        local_ws, lws_var = _optional_int(env, "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE")
    world_size = _int_var(env, size_var)
    rank = _int_var(env, rank_var)
    master_addr = env.get("MASTER_ADDR")
    if world_size > 1 and not master_addr:
        raise LaunchError(
            f"mpirun: MASTER_ADDR is not set ({size_var}={world_size}). MPI gives no rendezvous address: "
            "export rank 0's host to every rank, e.g. "
            "`mpirun -x MASTER_ADDR=$(hostname) -x MASTER_PORT=29500 ...` (Open MPI) or "
            "`mpirun -genv MASTER_ADDR $(hostname) ...` (MPICH/Intel MPI)"
        )
    port, port_var = _master_port(env, MPI_DEFAULT_PORT)
    names = [n for n in (rank_var, size_var, lr_var, lws_var) if n]
    return LaunchInfo(
        launcher="mpirun",
        rank=rank,
        world_size=world_size,
        local_rank=0 if local_rank is None and world_size == 1 else local_rank,
        local_world_size=local_ws,
        group_rank=None,
        master_addr=master_addr or "127.0.0.1",
        master_port=port,
        variables=(*names, "MASTER_ADDR", port_var if port_var != "default" else f"port={port}"),
        run_id=env.get("OMPI_MCA_ess_base_jobid", env.get("PMI_JOBID", "mpi")),
    )


def _from_slurm(env: Mapping[str, str]) -> LaunchInfo:
    rank = _int_var(env, "SLURM_PROCID")
    world_size = _int_var(env, "SLURM_NTASKS")
    local_rank, _ = _optional_int(env, "SLURM_LOCALID")
    node_id, _ = _optional_int(env, "SLURM_NODEID")
    names = ["SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID"]
    local_ws: int | None = None
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        if env.get(name) and node_id is not None:
            try:
                counts = expand_tasks_per_node(env[name])
            except ValueError:
                continue
            if node_id < len(counts):
                local_ws = counts[node_id]
                names.append(name)
                break
    notes: list[str] = []
    if env.get("MASTER_ADDR"):
        master_addr: str | None = env["MASTER_ADDR"]
        names.append("MASTER_ADDR")
    else:
        master_addr = None
        # The step's list first: a step on part of the allocation starts task 0 on its own first node.
        for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
            if env.get(name):
                try:
                    master_addr = expand_nodelist(env[name])[0]
                except (ValueError, IndexError) as exc:
                    raise LaunchError(f"cannot expand {name}={env[name]!r}: {exc}") from None
                names.append(f"MASTER_ADDR<-{name}")
                break
        if master_addr is None and world_size > 1:
            raise LaunchError("srun: no MASTER_ADDR and no SLURM_JOB_NODELIST to take rank 0's host from")
    port, port_var = _master_port(env, slurm_master_port(0))
    names.append("MASTER_PORT" if port_var == "MASTER_PORT" else f"MASTER_PORT<-{port_var}")
    if "SLURM_STEP_ID" not in env and world_size > 1:
        notes.append("SLURM_STEP_ID is unset: inside an sbatch script, start one task per rank with srun")
    return LaunchInfo(
        launcher="srun",
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        local_world_size=local_ws,
        group_rank=node_id,
        master_addr=master_addr,
        master_port=port,
        variables=tuple(names),
        run_id=f"slurm-{env.get('SLURM_JOB_ID', '0')}.{env.get('SLURM_STEP_ID', 'batch')}",
        notes=tuple(notes),
    )


def detect_launch(env: Mapping[str, str] | None = None) -> LaunchInfo:
    """Rank and world from the launcher, first match wins.

    torchrun's RANK/WORLD_SIZE come first (torchrun is often started by srun, which sets SLURM_*
    too), then Open MPI and PMI (mpirun inside an sbatch script inherits the batch step's
    SLURM_PROCID=0, so SLURM_* would be wrong there), then srun's SLURM_PROCID/SLURM_NTASKS.
    Nothing at all means one process.
    """
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        info = _from_torchrun(env)
    elif "OMPI_COMM_WORLD_RANK" in env or ("PMI_RANK" in env and "PMI_SIZE" in env):
        info = _from_mpi(env)
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        info = _from_slurm(env)
    else:
        info = LaunchInfo("single", 0, 1, 0, 1, 0, None, None, ())
    if info.world_size < 1 or not 0 <= info.rank < info.world_size:
        raise LaunchError(f"{info.source}: rank {info.rank} is outside world size {info.world_size}")
    return info


# ---------------------------------------------------------------------------------------------
# Printing: every line flushed and prefixed with the rank, so interleaved job logs stay readable


def emit(text: str, *, err: bool = False) -> None:
    """Write whole lines in one call and flush: ranks sharing a pipe then never split a line."""
    stream = sys.stderr if err else sys.stdout
    stream.write(text if text.endswith("\n") else text + "\n")
    stream.flush()


def rank_print(rank: int, text: str, *, err: bool = False) -> None:
    emit("".join(f"[RANK {rank}] {line}\n" for line in text.splitlines() or [""]), err=err)


def verdict_line(script: str, ok: bool, detail: str) -> str:
    """The line a job-log reader greps for: `clusterprobe: ddp_check PASS world_size=4 ...`."""
    detail = " ".join(detail.split())  # always one line
    return f"clusterprobe: {script} {'PASS' if ok else 'FAIL'} {detail}".rstrip()


def format_table(header: Sequence[str], rows: Iterable[Sequence[object]], indent: str = "  ") -> str:
    """Columns sized to fit; numbers right-aligned, text left-aligned."""
    body = [list(row) for row in rows]
    numeric = [
        all(isinstance(row[i], int | float) and not isinstance(row[i], bool) for row in body)
        for i in range(len(header))
    ]
    text = [[_cell(value) for value in row] for row in body]
    widths = [max([len(h)] + [len(row[i]) for row in text]) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        out = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric, strict=True)]
        return (indent + "  ".join(out)).rstrip()

    return "\n".join([line(list(header))] + [line(row) for row in text])


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 1e6 else f"{value:.3g}"
    return "-" if value is None else str(value)


def peak_rss_bytes() -> int:
    """This process's peak resident set size (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def mib(nbytes: float) -> float:
    return round(nbytes / 2**20, 1)


# ---------------------------------------------------------------------------------------------
# Backend and device


def choose_backend_device(backend: str, device: str, local_rank: int | None) -> tuple[str, torch.device]:
    """auto: nccl on this rank's GPU when CUDA works, else gloo on CPU; explicit flags win.

    Calls torch.cuda.set_device before any NCCL work, so each rank owns one GPU.
    """
    cuda_ok = torch.cuda.is_available()
    if device == "auto":
        device = "cuda" if cuda_ok and backend in ("auto", "nccl") else "cpu"
    if backend == "auto":
        backend = "nccl" if device == "cuda" and dist.is_nccl_available() else "gloo"
    if backend == "nccl" and device != "cuda":
        raise LaunchError("--backend nccl needs --device cuda (NCCL moves GPU memory only)")
    if backend == "nccl" and not dist.is_nccl_available():
        raise LaunchError(f"--backend nccl: this torch {torch.__version__} was built without NCCL")
    if device == "cpu":
        return backend, torch.device("cpu")
    if not cuda_ok:
        raise LaunchError(
            f"--device cuda, but CUDA is not available (torch {torch.__version__}, "
            f"CUDA {torch.version.cuda}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
        )
    count = torch.cuda.device_count()
    if count == 1:  # Slurm --gpus-per-task / CUDA_VISIBLE_DEVICES already picked this rank's GPU
        index = 0
    elif local_rank is None:
        raise LaunchError("the launcher gives no local rank, so this rank cannot pick a GPU; set LOCAL_RANK")
    elif local_rank >= count:
        raise LaunchError(
            f"local rank {local_rank}, but only {count} GPUs visible: start at most {count} ranks per node"
        )
    else:
        index = local_rank
    torch.cuda.set_device(index)
    return backend, torch.device("cuda", index)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def barrier(device: torch.device) -> None:
    """dist.barrier on the rank's own GPU under NCCL (otherwise NCCL guesses a device)."""
    if device.type == "cuda" and dist.get_backend() == "nccl":
        dist.barrier(device_ids=[device.index or 0])
    else:
        dist.barrier()


# ---------------------------------------------------------------------------------------------
# Watchdog: the last resort against a silent hang


class Watchdog:
    """Ends the process when the current activity takes longer than its budget.

    The main thread names what it is about to wait for (`expect`); a daemon thread checks the
    deadline. The process-group timeout normally fires first with the backend's own error; this
    covers what it does not (a hung NCCL call, a store that never answers, teardown).
    """

    def __init__(self, script: str, rank: int, timeout: float) -> None:
        self.script = script
        self.rank = rank
        self.timeout = timeout
        self.grace = min(10.0, max(1.0, 0.1 * timeout))
        self._lock = threading.Lock()
        self._activity = "starting"
        self._since = time.monotonic()
        self._deadline = math.inf
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="clusterprobe-watchdog", daemon=True)
        self._thread.start()

    def expect(self, activity: str, seconds: float | None = None) -> None:
        """From now, allow `seconds` (default: the timeout) for `activity`."""
        budget = self.timeout if seconds is None else seconds
        with self._lock:
            self._activity = activity
            self._since = time.monotonic()
            self._deadline = self._since + budget + self.grace

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        poll = min(1.0, max(0.05, self.timeout / 20))
        while not self._stop.wait(poll):
            with self._lock:
                late = time.monotonic() > self._deadline
                activity, waited = self._activity, time.monotonic() - self._since
            if late:
                reason = f"timeout: no progress for {waited:.0f} s while {activity}"
                report_failure(self.script, self.rank, reason)
                os._exit(EXIT_TIMEOUT)


def report_failure(script: str, rank: int, reason: str) -> None:
    """Every rank says why on stderr; rank 0 also ends its stdout with the FAIL verdict."""
    rank_print(rank, f"error: {reason}", err=True)
    if rank == 0:
        emit(verdict_line(script, False, reason))


# ---------------------------------------------------------------------------------------------
# Rendezvous under one deadline


def first_line(exc: BaseException, limit: int = 400) -> str:
    """An exception's first line, for one-line reports, without gloo's '[/path/pair.cc:537] ' prefix."""
    text = re.sub(r"^\[[^\]\s]+:\d+\]\s*", "", str(exc).strip())
    return text.splitlines()[0][:limit] if text else type(exc).__name__


def _remaining(deadline: float) -> float:
    return max(0.1, deadline - time.monotonic())


def _await_listener(host: str, port: int, deadline: float) -> str | None:
    """Poll until something accepts on host:port; None, or the last error when the deadline passed.

    A plain socket first, because TCPStore's own client retries back off past our deadline and
    log a C++ stack trace per attempt.
    """
    delay = 0.05
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(2.0, _remaining(deadline))):
                return None
        except socket.gaierror as exc:
            error = f"cannot resolve {host!r} ({exc.strerror})"
        except OSError as exc:
            error = exc.strerror or type(exc).__name__
        if time.monotonic() + delay > deadline:
            return error
        time.sleep(delay)
        delay = min(2 * delay, 1.0)


def _connect_store(info: LaunchInfo, deadline: float, timeout: float) -> Store:
    where = f"{info.master_addr}:{info.master_port}"
    host_it = info.rank == 0 and not info.agent_store
    if not host_it:
        error = _await_listener(str(info.master_addr), int(info.master_port or 0), deadline)
        if error:
            host = "the torchrun agent" if info.agent_store else "rank 0"
            raise RendezvousTimeout(
                f"waited {timeout:g} s to reach the rendezvous store at {where} (hosted by {host}): {error}"
            )
    try:
        return TCPStore(
            host_name=str(info.master_addr),
            port=int(info.master_port or 0),
            world_size=info.world_size,
            is_master=host_it,
            timeout=datetime.timedelta(seconds=_remaining(deadline)),
            wait_for_workers=False,  # we wait ourselves, to say who is missing
            multi_tenant=True,
        )
    except (RuntimeError, ValueError, OSError) as exc:
        first = first_line(exc)
        if host_it:
            raise RendezvousTimeout(
                f"rank 0 could not serve the rendezvous store on port {info.master_port}: {first} "
                "(port in use? set MASTER_PORT)"
            ) from None
        host = "the torchrun agent" if info.agent_store else "rank 0"
        raise RendezvousTimeout(
            f"waited {timeout:g} s to reach the rendezvous store at {where} (hosted by {host}): {first}"
        ) from None


RENDEZVOUS_OK = "ok"
GAVE_UP = "gave up: "


def _wait_for_ranks(store: Store, info: LaunchInfo, prefix: str, deadline: float, timeout: float) -> None:
    """Count this rank in, then wait until all have; on timeout, name the missing ranks.

    One key ends the wait for everyone: the last rank to arrive sets it to "ok"; the first rank
    whose deadline passes sets it (first writer wins) to why it gave up, so the other waiting
    ranks stop at once with the same message instead of finding the store gone.
    """
    where = f"{info.master_addr}:{info.master_port}"
    done_key, joined_key, read_key = f"{prefix}/all", f"{prefix}/joined", f"{prefix}/read"
    store.set(f"{prefix}/rank/{info.rank}", socket.gethostname())
    if store.add(joined_key, 1) >= info.world_size:
        store.compare_set(done_key, "", RENDEZVOUS_OK)
    try:
        try:
            store.wait([done_key], datetime.timedelta(seconds=_remaining(deadline)))
        except RuntimeError:  # our deadline passed: say who is missing, unless someone already did
            joined = store.add(joined_key, 0)
            missing = [r for r in range(info.world_size) if not store.check([f"{prefix}/rank/{r}"])]
            shown = ", ".join(map(str, missing[:16])) + (", ..." if len(missing) > 16 else "")
            hint = f"; {info.notes[0]}" if info.notes else ""
            reason = (f"waited {timeout:g} s for {info.world_size - joined} of {info.world_size} ranks at "
                      f"{where} (missing ranks: {shown}){hint}")
            store.compare_set(done_key, "", GAVE_UP + reason)
        outcome = store.get(done_key).decode()
        if outcome == RENDEZVOUS_OK:
            return
        store.add(read_key, 1)
        if info.rank == 0 and not info.agent_store:  # we host the store: let the others read why
            stop = time.monotonic() + 2.0
            while store.add(read_key, 0) < store.add(joined_key, 0) and time.monotonic() < stop:
                time.sleep(0.05)
    except RuntimeError:  # the store went away: its host gave up first
        raise RendezvousTimeout(
            f"waited {timeout:g} s for all {info.world_size} ranks at {where}; the store closed "
            "(rank 0 gave up waiting)"
        ) from None
    raise RendezvousTimeout(outcome.removeprefix(GAVE_UP))


def join_process_group(
    info: LaunchInfo, backend: str, device: torch.device, timeout: float, script: str
) -> None:
    """Rendezvous, then init_process_group with `timeout` for every later collective.

    Under torchrun the agent's store at MASTER_ADDR:MASTER_PORT is reused (as env:// would);
    otherwise rank 0 hosts it. One process needs no network at all.
    """
    deadline = time.monotonic() + timeout
    prefix = f"clusterprobe/{script}/{info.run_id}"
    store: Store
    if info.world_size == 1:
        store = HashStore()
    else:
        store = _connect_store(info, deadline, timeout)
        _wait_for_ranks(store, info, prefix, deadline, timeout)
        # the store was opened with what was left of the deadline; the group's work gets all of it
        store.set_timeout(datetime.timedelta(seconds=timeout))
    kwargs: dict[str, Any] = {}
    if device.type == "cuda" and backend == "nccl" and _accepts_device_id():
        kwargs["device_id"] = device  # binds the GPU, and NCCL connects now instead of lazily
    try:
        dist.init_process_group(
            backend,
            store=PrefixStore(f"{prefix}/pg", store),
            rank=info.rank,
            world_size=info.world_size,
            timeout=datetime.timedelta(seconds=timeout),
            **kwargs,
        )
    except RuntimeError as exc:
        raise RendezvousTimeout(f"init_process_group({backend}) failed: {str(exc).strip()[:500]}") from None


def _accepts_device_id() -> bool:
    import inspect

    return "device_id" in inspect.signature(dist.init_process_group).parameters


def gather_objects(obj: object, device: torch.device) -> list[Any]:
    """Every rank's JSON-able `obj`, indexed by rank.

    Not dist.all_gather_object: that needs numpy in recent torch (images may lack it) and
    unpickles what peers send; JSON bytes in a uint8 tensor need neither.
    """
    data = json.dumps(obj, default=_jsonable).encode()
    world = dist.get_world_size()
    length = torch.tensor([len(data)], dtype=torch.int64, device=device)
    lengths = [torch.zeros_like(length) for _ in range(world)]
    dist.all_gather(lengths, length)
    longest = max(int(n.item()) for n in lengths)
    payload = torch.zeros(longest, dtype=torch.uint8)
    payload[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    payload = payload.to(device)
    gathered = [torch.empty_like(payload) for _ in range(world)]
    dist.all_gather(gathered, payload)
    return [
        json.loads(bytes(chunk[: int(n.item())].cpu().tolist()))
        for chunk, n in zip(gathered, lengths, strict=True)
    ]


def _jsonable(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def node_indices(hosts: Sequence[str]) -> list[int]:
    """Node index of each rank from its host, in order of first appearance by rank."""
    order: dict[str, int] = {}
    for host in hosts:
        order.setdefault(host, len(order))
    return [order[host] for host in hosts]


def local_positions(hosts: Sequence[str]) -> tuple[list[int], list[int]]:
    """(local rank, ranks on that host) of each rank, for launchers that give neither."""
    seen: dict[str, int] = {}
    local: list[int] = []
    for host in hosts:
        local.append(seen.get(host, 0))
        seen[host] = local[-1] + 1
    return local, [seen[host] for host in hosts]


# ---------------------------------------------------------------------------------------------
# One way to run a probe, for both scripts


@dataclass
class ProbeContext:
    script: str
    info: LaunchInfo
    backend: str
    device: torch.device
    timeout: float
    watchdog: Watchdog
    host: str = field(default_factory=socket.gethostname)

    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def world_size(self) -> int:
        return self.info.world_size

    def say(self, text: str) -> None:
        rank_print(self.rank, text)

    def rank0(self, text: str) -> None:
        """Rank 0's tables and summaries: plain stdout, no prefix."""
        if self.rank == 0:
            emit(text)


def start_probe(script: str, backend: str, device: str, timeout: float) -> ProbeContext:
    """Detect the launch, pick backend and device, join the group (each step under the timeout)."""
    info = detect_launch()
    picked_backend, picked_device = choose_backend_device(backend, device, info.local_rank)
    watchdog = Watchdog(script, info.rank, timeout)
    ctx = ProbeContext(script, info, picked_backend, picked_device, timeout, watchdog)
    # who this rank is, before anything can hang: a stuck job's log still shows every rank
    gpu = f" ({torch.cuda.get_device_name(picked_device)})" if picked_device.type == "cuda" else ""
    ctx.say(f"LOCAL_RANK={_known(info.local_rank)} RANK={info.rank} GROUP_RANK={_known(info.group_rank)} "
            f"LOCAL_WORLD_SIZE={_known(info.local_world_size)} WORLD_SIZE={info.world_size} host={ctx.host} "
            f"device={picked_device}{gpu} backend={picked_backend} source={info.source}")
    for note in info.notes:
        ctx.say(f"note: {note}")
    watchdog.expect(
        f"joining the process group: {info.world_size} ranks at {info.master_addr}:{info.master_port}"
    )
    join_process_group(info, picked_backend, picked_device, timeout, script)
    return ctx


def _known(value: int | None) -> str:
    return "?" if value is None else str(value)


def finish_probe(ctx: ProbeContext, healthy: bool) -> None:
    """Leave together: a final barrier (rank 0 may host the store), then tear the group down."""
    ctx.watchdog.expect("the final barrier and process-group teardown")
    if healthy:
        barrier(ctx.device)
    dist.destroy_process_group()
    ctx.watchdog.stop()


def conclude(ctx: ProbeContext, ok: bool, detail: str, rank_error: str = "") -> int:
    """After teardown: rank 0 ends its output with the verdict line; a failing rank says why."""
    if ctx.rank == 0:
        emit(verdict_line(ctx.script, ok, detail))
    elif not ok:
        rank_print(ctx.rank, f"error: {rank_error or detail}", err=True)
    return EXIT_OK if ok else EXIT_FAIL


def run_probe(script: str, main: Callable[[], int]) -> int:
    """Run `main`; turn a ProbeError into the FAIL verdict and its exit code."""
    try:
        return main()
    except ProbeError as exc:
        code, reason = exc.exit_code, str(exc)
    except KeyboardInterrupt:
        code, reason = EXIT_FAIL, "interrupted"
    except Exception as exc:
        traceback.print_exc()
        code, reason = EXIT_FAIL, f"{type(exc).__name__}: {first_line(exc)}"
    report_failure(script, _rank_hint(), reason)
    if dist.is_available() and dist.is_initialized():
        # A broken group can hang in teardown (NCCL); give it a few seconds, then leave anyway.
        timer = threading.Timer(10.0, os._exit, (code,))
        timer.daemon = True
        timer.start()
        with contextlib.suppress(Exception):  # already failing; the verdict is out
            dist.destroy_process_group()
        timer.cancel()
    return code


def _rank_hint() -> int:
    """Best guess at this rank for error messages, even when detect_launch failed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0
