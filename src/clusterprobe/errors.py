"""The one error hierarchy. Each class has its own exit code; only the command-line layer
(tasks.py) turns an error into an exit code and a message, never a traceback.

Every error carries a message that names the problem and, where we know it, the fix.
"""

from __future__ import annotations


class ClusterProbeError(Exception):
    """Base class: a failure a user can act on."""

    exit_code = 1

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        if self.fix:
            return f"{self.message}\n  fix: {self.fix}"
        return self.message


class ConfigError(ClusterProbeError):
    """variants.yaml, invoke.yaml or a command-line value is wrong."""

    exit_code = 2


class ToolNotFoundError(ClusterProbeError):
    """An external program we need is not installed."""

    exit_code = 3


class DockerEngineError(ClusterProbeError):
    """The Docker engine cannot be reached."""

    exit_code = 4


class BaseImageNotFoundError(ClusterProbeError):
    """The base image of a variant is neither local nor pullable."""

    exit_code = 5


class BuildError(ClusterProbeError):
    """`docker build` failed; the message carries the failing step and its last log lines."""

    exit_code = 6


class SmokeTestError(ClusterProbeError):
    """A freshly built image does not pass its smoke test."""

    exit_code = 7


class AuthError(ClusterProbeError):
    """AWS credentials or registry login failed."""

    exit_code = 8


class RegistryError(ClusterProbeError):
    """A push to, or a query of, an image registry failed."""

    exit_code = 9


class PreflightError(ClusterProbeError):
    """A check before any work found a problem (free space, image reference, missing input)."""

    exit_code = 10


class SquashError(ClusterProbeError):
    """Converting an image to a squashfs file failed."""

    exit_code = 11


class StageError(ClusterProbeError):
    """Rendering or staging Slurm job files failed."""

    exit_code = 12


class SlurmError(ClusterProbeError):
    """sbatch or another Slurm command failed."""

    exit_code = 13


class CommandError(ClusterProbeError):
    """An external command exited non-zero."""

    exit_code = 14


class LockedError(ClusterProbeError):
    """Another run holds the lock on the same output."""

    exit_code = 15


class JobFailedError(ClusterProbeError):
    """A submitted job ran and its verdict is FAIL (or it never finished in time)."""

    exit_code = 16
