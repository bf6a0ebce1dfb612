"""Submitting staged jobs to Slurm from a login node (sbatch, through Runner)."""

from __future__ import annotations

import re
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
