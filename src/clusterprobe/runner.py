"""The one helper that runs external commands.

It checks that the program exists before running it, prints the command quoted exactly as it
would be typed (`shlex.join`), honours dry-run, and raises `CommandError` with the tail of the
command's output on failure. Secrets travel only on stdin (`secret_input`), never in argv or in
anything printed.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from clusterprobe.errors import CommandError, ToolNotFoundError

# What to install when a tool is missing (Debian package names; users on other distros will
# recognise them).
INSTALL_HINTS: dict[str, str] = {
    "docker": "install the Docker engine and CLI (Debian: apt-get install docker.io)",
    "mksquashfs": "install squashfs-tools (apt-get install squashfs-tools)",
    "unsquashfs": "install squashfs-tools (apt-get install squashfs-tools)",
    "enroot": "install enroot (https://github.com/NVIDIA/enroot) or use --backend native",
    "sbatch": "run on a Slurm login node, or install slurm-client",
    "scontrol": "run on a Slurm login node, or install slurm-client",
    "shellcheck": "apt-get install shellcheck",
    "git": "apt-get install git",
}


def tail(text: str, lines: int = 20) -> str:
    """The last `lines` lines of `text`, for error messages."""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def echo_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def display_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """The command as a user would type it: `K=V ... prog args`, every word shell-quoted."""
    prefix = [f"{k}={shlex.quote(v)}" for k, v in sorted((env or {}).items())]
    return " ".join([*prefix, shlex.join(argv)])


def require_tool(name: str) -> str:
    """Absolute path of `name` on PATH, or a ToolNotFoundError that says how to install it."""
    path = shutil.which(name)
    if path is None:
        raise ToolNotFoundError(f"'{name}' was not found on PATH", fix=INSTALL_HINTS.get(name))
    return path


@dataclass
class Runner:
    """Runs (or, with dry_run, only prints) external commands."""

    dry_run: bool = False
    echo: Callable[[str], None] = field(default=echo_stderr)
    prefix: str = "+ "

    def show(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self.echo(self.prefix + display_command(argv, env))

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        secret_input: str | None = None,
        capture: bool = False,
        check: bool = True,
        timeout: float | None = None,
        quiet: bool = False,
        mutates: bool = True,
    ) -> subprocess.CompletedProcess[str] | None:
        """Run `argv`; `env` is added to the current environment and shown in the echo.

        `secret_input` is fed on stdin and never printed. With dry_run, commands that change
        something (`mutates=True`) are printed and not run (returns None); read-only queries
        (`mutates=False`) still run so that the plan they feed is accurate.
        """
        if not quiet:
            self.show(argv, env)
        if self.dry_run and mutates:
            return None
        require_tool(argv[0])
        full_env = {**os.environ, **env} if env else None
        try:
            proc = subprocess.run(
                list(argv),
                env=full_env,
                cwd=cwd,
                input=secret_input,
                text=True,
                capture_output=capture,
                stdin=subprocess.DEVNULL if secret_input is None else None,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise CommandError(f"'{display_command(argv)}' did not finish within {timeout} s") from exc
        if check and proc.returncode != 0:
            output = tail((proc.stdout or "") + (proc.stderr or "")) if capture else ""
            detail = f":\n{output}" if output else " (its output is above)"
            raise CommandError(
                f"'{display_command(argv)}' exited with code {proc.returncode}{detail}"
            )
        return proc

    def output(self, argv: Sequence[str], **kwargs: object) -> str:
        """stdout of a read-only command (runs even in dry-run)."""
        proc = self.run(argv, capture=True, mutates=False, quiet=True, **kwargs)  # type: ignore[arg-type]
        assert proc is not None
        return proc.stdout
