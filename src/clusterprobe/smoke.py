"""Run things inside an image the way Pyxis would (no ENTRYPOINT, no GPU): the version probe and
the smoke test that every freshly built image must pass before it is tagged or pushed.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

from clusterprobe import cache
from clusterprobe.errors import DockerEngineError, SmokeTestError
from clusterprobe.runner import Runner, display_command, tail

IMAGE_DIR = "/opt/clusterprobe"
# CPU only, like a smoke test on a CI runner: GPU images must still import torch and run gloo.
SMOKE_ENV = {"NVIDIA_VISIBLE_DEVICES": "void", "OMP_NUM_THREADS": "1"}
SMOKE_VERSION = 1  # bump when the smoke steps change, so cached verdicts are redone


@dataclass(frozen=True)
class SmokeStep:
    name: str
    argv: tuple[str, ...]
    needs: str | None = None  # entrypoint file that must exist in the checkout for this step


SMOKE_STEPS: tuple[SmokeStep, ...] = (
    SmokeStep("versions", ("python", f"{IMAGE_DIR}/versions.py")),
    SmokeStep(
        "ddp_check",
        ("torchrun", "--standalone", "--nproc_per_node=2", f"{IMAGE_DIR}/ddp_check.py",
         "--backend", "gloo", "--device", "cpu", "--epochs", "1", "--timeout", "120",
         "--json", "/tmp/ddp_check.json"),
        needs="ddp_check.py",
    ),
    SmokeStep(
        "comms_bench",
        ("torchrun", "--standalone", "--nproc_per_node=2", f"{IMAGE_DIR}/comms_bench.py",
         "--backend", "gloo", "--device", "cpu", "-b", "8", "-e", "64K", "-f", "8", "-n", "5", "-w", "2",
         "-c", "1", "--collective", "all_reduce,all_gather,broadcast", "--timeout", "120",
         "--json", "/tmp/comms_bench.json"),
        needs="comms_bench.py",
    ),
)


@dataclass
class SmokeResult:
    image_id: str
    versions: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)
    cached: bool = False


def docker_run_command(image: str, argv: Sequence[str]) -> list[str]:
    """The `docker run` line equivalent to what `run_in_image` does, for dry-run and logs."""
    env = [arg for k, v in sorted(SMOKE_ENV.items()) for arg in ("-e", f"{k}={v}")]
    return ["docker", "run", "--rm", "--shm-size", "1g", "--entrypoint", "",
            *env, image, *argv]


def run_in_image(
    client: docker.DockerClient, image: str, argv: Sequence[str], timeout: float
) -> tuple[int, str]:
    """Run `argv` in a fresh container of `image`; (exit code, combined output). Always removed."""
    try:
        container = client.containers.create(
            image,
            command=list(argv),
            entrypoint=[""],  # Pyxis does not run the image's ENTRYPOINT; neither do we
            environment=SMOKE_ENV,
            # Default bridge network, not "none": torchrun's rendezvous resolves the container's
            # hostname, which only the bridge network's /etc/hosts provides.
            shm_size="1g",
            labels={"io.clusterprobe.smoke": "1"},
        )
    except docker.errors.APIError as exc:
        raise DockerEngineError(f"could not create a container of {image}: {exc.explanation or exc}") from None
    try:
        container.start()
    except docker.errors.APIError as exc:
        container.remove(force=True)
        explanation = str(exc.explanation or exc)
        if "executable file not found" in explanation or "no such file or directory" in explanation:
            # The image lacks the program: the image's problem (exit 127, as a shell says), not the engine's.
            return 127, f"{argv[0]}: not found in the image ({explanation})"
        raise DockerEngineError(f"could not start a container of {image}: {explanation}") from None
    try:
        try:
            status = container.wait(timeout=timeout)
            code = int(status.get("StatusCode", 1))
        except requests.exceptions.RequestException:
            container.kill()
            code = 124
        output = container.logs(stdout=True, stderr=True).decode(errors="replace")
        if code == 124:
            output += f"\n[clusterprobe] killed after {timeout:.0f} s"
        return code, output
    finally:
        with contextlib.suppress(docker.errors.APIError):
            container.remove(force=True)


def probe_versions(
    client: docker.DockerClient, runner: Runner, image: str, image_id: str, probe_script: Path
) -> dict[str, Any]:
    """Versions inside `image` (torch, CUDA, NCCL, EFA), by running versions.py in it; cached by ID."""
    record = cache.load("probe", image_id)
    if record is not None:
        return record
    source = probe_script.read_text()
    runner.echo(runner.prefix + display_command(docker_run_command(image, ["python", "-c", "..."]))
                + f"  # -c \"$(cat {probe_script})\"")
    code, output = run_in_image(client, image, ["python", "-c", source], timeout=300)
    versions = _last_json_object(output)
    if code != 0 or versions is None or not versions.get("torch"):
        raise SmokeTestError(
            f"could not read versions from {image}: python + torch must be on PATH in the image "
            f"(exit {code}):\n{tail(output)}",
            fix="choose a base image with python and torch, or fix the one given",
        )
    cache.store("probe", image_id, versions)
    return versions


def smoke_test(
    client: docker.DockerClient,
    runner: Runner,
    image_id: str,
    label: str,
    entrypoints: Path,
    *,
    force: bool = False,
    timeout: float = 180,
) -> SmokeResult:
    """Run the smoke steps in `image_id`; SmokeTestError on the first failure.

    A pass is recorded by image ID, so an unchanged image is not tested again (unless `force`).
    """
    steps = [s for s in SMOKE_STEPS if s.needs is None or (entrypoints / s.needs).exists()]
    record = None if force else cache.load("smoke", image_id)
    if record and record.get("ok") and record.get("smoke_version") == SMOKE_VERSION:
        runner.echo(f"[{label}] smoke test already passed for {image_id[:19]}: skipped")
        return SmokeResult(image_id, record["versions"], record["steps"], cached=True)
    result = SmokeResult(image_id, {})
    for step in steps:
        runner.show(docker_run_command(image_id.removeprefix("sha256:")[:12], step.argv))
        start = time.monotonic()
        code, output = run_in_image(client, image_id, step.argv, timeout)
        seconds = round(time.monotonic() - start, 2)
        result.steps.append({"name": step.name, "ok": code == 0, "seconds": seconds})
        if code != 0:
            raise SmokeTestError(
                f"[{label}] smoke test '{step.name}' failed (exit {code}) in image {image_id[:19]}:\n"
                f"{tail(output, 30)}",
                fix="run the command above to reproduce; the image is not tagged or pushed",
            )
        runner.echo(f"[{label}] smoke test '{step.name}': ok ({seconds} s)")
        if step.name == "versions":
            result.versions = _last_json_object(output) or {}
    cache.store("smoke", image_id, {"ok": True, "smoke_version": SMOKE_VERSION,
                                    "versions": result.versions, "steps": result.steps})
    return result


def _last_json_object(output: str) -> dict[str, Any] | None:
    """The JSON object a probe printed (the last '{' at the start of a line to the end)."""
    start = output.rfind("\n{")
    start = 0 if output.startswith("{") and start < 0 else start + 1
    try:
        value = json.loads(output[start:])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
