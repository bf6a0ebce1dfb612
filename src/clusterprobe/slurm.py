"""Submitting staged jobs to Slurm from a login node (sbatch, through Runner)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from clusterprobe.errors import CommandError, SlurmError
from clusterprobe.runner import Runner

# `sbatch --parsable` prints "JOBID" or "JOBID;CLUSTER".
_PARSABLE = re.compile(r"^(\d+)(;\S+)?$")


def parse_job_id(stdout: str) -> str:
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    match = _PARSABLE.match(lines[-1]) if lines else None
    if match is None:
        raise SlurmError(f"sbatch answered {stdout.strip()!r}, not a job ID",
                         fix="run the sbatch command above by hand to see what it says")
    return match.group(1)


def submit(runner: Runner, script: Path) -> str | None:
    """sbatch `script` from its own folder; the job ID, or None in a dry run (the command is printed)."""
    argv = ["sbatch", "--parsable", str(script)]
    try:
        proc = runner.run(argv, cwd=script.parent if not runner.dry_run else None, capture=True)
    except CommandError as exc:
        raise SlurmError(
            f"sbatch refused {script}: {exc.message}",
            fix="check --partition, --account, --nodes and --gpus-per-node against `sinfo -s`, "
            f"or test the request with `sbatch --test-only {script}`",
        ) from None
    if proc is None:
        return None
    return parse_job_id(proc.stdout)


# States after which a job never runs again (sacct-free: without accounting storage only
# `scontrol show job` knows a job, for MinJobAge seconds after it ended).
TERMINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                   "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


def job_state(runner: Runner, job_id: str) -> tuple[str, str] | None:
    """(JobState, ExitCode) as `scontrol show job` reports them; None once Slurm forgot the job."""
    out = runner.output(["scontrol", "show", "job", "--oneliner", job_id], check=False)
    state = re.search(r"\bJobState=(\S+)", out)
    code = re.search(r"\bExitCode=(\S+)", out)
    if state is None:
        return None
    return state.group(1), code.group(1) if code else ""


def wait_for_jobs(
    runner: Runner,
    job_ids: Sequence[str],
    *,
    timeout: float,
    finished: Callable[[str], bool] = lambda _: False,
    poll: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, tuple[str, str]]:
    """Poll until every job is in a terminal state; {job_id: (state, exit code)}.

    `finished(job_id)` says whether a job Slurm no longer knows left its result behind (then it
    counts as done, state "DONE"). Jobs still pending or running at `timeout` get state
    "WAIT_TIMEOUT" (they keep running; the caller says so).
    """
    deadline = time.monotonic() + timeout
    states: dict[str, tuple[str, str]] = {}
    last_line = ""
    while True:
        for job_id in job_ids:
            if job_id in states and states[job_id][0] in TERMINAL_STATES | {"DONE"}:
                continue
            info = job_state(runner, job_id)
            if info is None:
                info = ("DONE", "") if finished(job_id) else ("UNKNOWN", "")
            states[job_id] = info
        pending = [j for j in job_ids if states[j][0] not in TERMINAL_STATES | {"DONE", "UNKNOWN"}]
        line = "jobs: " + ", ".join(f"{j} {states[j][0]}" for j in job_ids)
        if line != last_line:
            runner.echo(f"==> {line}")
            last_line = line
        if not pending:
            return states
        if time.monotonic() >= deadline:
            for job_id in pending:
                states[job_id] = ("WAIT_TIMEOUT", states[job_id][1])
            return states
        sleep(poll)
