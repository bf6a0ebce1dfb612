"""The Docker engine, reached through the Docker SDK, with errors a user can act on."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

import docker
import docker.errors
from docker.models.images import Image

from clusterprobe.errors import BuildError, DockerEngineError
from clusterprobe.runner import tail


def connect(timeout: int = 600) -> docker.DockerClient:
    """A client whose engine answered a ping; DockerEngineError otherwise."""
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except docker.errors.DockerException as exc:
        raise DockerEngineError(
            f"cannot reach the Docker engine at {where}: {_short(exc)}",
            fix="start it (systemctl start docker, or `dockerd &`), check DOCKER_HOST, "
            "and that you may use the socket (docker group)",
        ) from None
    return client


def get_image(client: docker.DockerClient, ref: str) -> Image | None:
    """The local image `ref` (tag or ID), or None when the engine doesn't have it."""
    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        raise DockerEngineError(f"the Docker engine failed to inspect {ref}: {_short(exc)}") from None


def image_labels(image: Image) -> dict[str, str]:
    labels: dict[str, str] | None = image.attrs.get("Config", {}).get("Labels")
    return dict(labels or {})


def image_size(image: Image) -> int:
    size: Any = image.attrs.get("Size", 0)
    return int(size)


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) < 400 else text[:400] + "..."


@dataclass
class StepOutcome:
    number: int
    instruction: str
    cached: bool


def stream_build(
    client: docker.DockerClient,
    echo: Callable[[str], None],
    *,
    label: str,
    context: IO[bytes],
    dockerfile: str,
    buildargs: Mapping[str, str],
    labels: Mapping[str, str],
    tag: str,
    no_cache: bool = False,
) -> tuple[str, list[StepOutcome]]:
    """Run a classic-builder build from a tar context, printing its steps as they come.

    Returns (image ID, step outcomes); BuildError names the failing step and the last log lines.
    """
    steps: list[StepOutcome] = []
    log: list[str] = []
    image_id = ""
    try:
        stream = client.api.build(
            fileobj=context,
            custom_context=True,
            dockerfile=dockerfile,
            buildargs=dict(buildargs),
            labels=dict(labels),
            tag=tag,
            rm=True,
            forcerm=True,
            pull=False,
            nocache=no_cache,
            decode=True,
        )
        for event in stream:
            if "stream" in event:
                for line in event["stream"].splitlines():
                    if not line.strip():
                        continue
                    log.append(line)
                    echo(f"[{label}] {line}")
                    if line.startswith("Step "):
                        number, _, instruction = line[5:].partition(" : ")
                        steps.append(StepOutcome(int(number.split("/")[0]), instruction, cached=False))
                    elif line.strip() == "---> Using cache" and steps:
                        steps[-1].cached = True
            elif "error" in event:
                raise BuildError(_failure_message(label, steps, log, event["error"]),
                                 fix="fix the failing step; the image was not tagged")
            elif "aux" in event and "ID" in event["aux"]:
                image_id = event["aux"]["ID"]
    except docker.errors.APIError as exc:
        raise BuildError(_failure_message(label, steps, log, str(exc.explanation or exc))) from None
    except docker.errors.DockerException as exc:
        raise DockerEngineError(f"the Docker engine failed during the build of {label}: {exc}") from None
    if not image_id:
        image = get_image(client, tag)
        if image is None:
            raise BuildError(_failure_message(label, steps, log, "the build produced no image"))
        image_id = str(image.id)
    return image_id, steps


def _failure_message(label: str, steps: Sequence[StepOutcome], log: Sequence[str], error: str) -> str:
    where = f"step {steps[-1].number} ({steps[-1].instruction})" if steps else "before the first step"
    return f"build of '{label}' failed at {where}: {error.strip()}\nlast lines of its log:\n" + tail(
        "\n".join(log), 15
    )
