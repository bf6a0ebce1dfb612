"""The GitHub workflow files read as data, for the tests that hold them to what .ci/run and the
invoke tasks do. GitHub itself cannot be reached from here: the workflows are validated offline
and their `run:` steps are executed with bash the way a runner executes them."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
EXPRESSION = re.compile(r"\$\{\{.*?\}\}", re.DOTALL)
# What a GitHub-hosted runner runs a `run:` step with (shell: bash, the default on Linux).
GITHUB_BASH = ["bash", "--noprofile", "--norc", "-eo", "pipefail"]


@dataclass(frozen=True)
class Step:
    workflow: str
    job: str
    index: int
    raw: dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.raw.get("id", ""))

    @property
    def run(self) -> str | None:
        value = self.raw.get("run")
        return None if value is None else str(value)

    @property
    def uses(self) -> str | None:
        value = self.raw.get("uses")
        return None if value is None else str(value)

    @property
    def condition(self) -> str:
        return str(self.raw.get("if", ""))

    def label(self) -> str:
        return f"{self.workflow}: jobs.{self.job}.steps[{self.index}] ({self.id or self.raw.get('name', '')})"


def load(name: str) -> dict[str, Any]:
    raw: dict[Any, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the key `on` as the boolean True.
    if True in raw:
        raw["on"] = raw.pop(True)
    return {str(k): v for k, v in raw.items()}


def workflow_files() -> list[Path]:
    return sorted(WORKFLOWS.glob("*.yml")) + sorted(WORKFLOWS.glob("*.yaml"))


def steps(name: str, job: str | None = None) -> list[Step]:
    data = load(name)
    out = []
    for job_id, body in data["jobs"].items():
        if job is not None and job_id != job:
            continue
        out += [Step(name, job_id, i, raw) for i, raw in enumerate(body.get("steps", []))]
    return out


def run_steps() -> list[Step]:
    return [s for path in workflow_files() for s in steps(path.name) if s.run is not None]


def as_shell_script(step: Step, placeholder: str = "GHA_EXPRESSION") -> str:
    """The step's script as a file bash runs, `${{ ... }}` replaced by a plain word."""
    assert step.run is not None
    return "#!/usr/bin/env bash\nset -eo pipefail\n" + EXPRESSION.sub(placeholder, step.run)


def command_lines(script: str) -> list[str]:
    """Non-empty, non-comment lines of a script."""
    return [line.strip() for line in script.splitlines() if line.strip() and not line.strip().startswith("#")]


def _git(cwd: Path, *args: str) -> str:
    git = shutil.which("git")
    if git is None:
        raise AssertionError("git is not installed (tools/bootstrap.sh installs it)")
    proc = subprocess.run([git, "-C", str(cwd), "-c", "user.name=clusterprobe-tests",
                           "-c", "user.email=tests@clusterprobe.invalid", *args],
                          capture_output=True, text=True, check=True, timeout=120)
    return proc.stdout


def snapshot_checkout(dest: Path) -> str:
    """A checkout as a runner has it: this working tree's files (tracked and untracked, not
    ignored) committed into a fresh repository at `dest`, with this machine's .venv linked in.
    Other people editing this checkout meanwhile then change nothing under a running test.
    Returns the snapshot's commit."""
    listing = _git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    dest.mkdir(parents=True)
    for rel in filter(None, listing.split("\0")):
        source = ROOT / rel
        if source.is_file():  # listed but deleted in the working tree: not in the snapshot
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)
    (dest / ".venv").symlink_to(ROOT / ".venv")
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "snapshot")
    return _git(dest, "rev-parse", "HEAD").strip()
