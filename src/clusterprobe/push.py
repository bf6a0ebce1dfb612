"""`invoke push`: publish built variant images to any Docker v2 registry (ECR, GHCR, a mirror).

A tag whose manifest in the registry already points at our image (same config digest, which
is the image ID) is skipped without uploading anything; transient failures are retried with
exponential backoff. Pushing a tag to ECR logs in first when the engine has no credentials.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors
from docker.models.images import Image

from clusterprobe import ecr, engine
from clusterprobe.build import INPUTS_LABEL, versioned_tag
from clusterprobe.errors import ConfigError, RegistryError
from clusterprobe.imageref import ImageRef
from clusterprobe.registry import RegistryClient, docker_credentials
from clusterprobe.runner import Runner

TRANSIENT = (
    "connection reset", "connection refused", "timeout", "timed out", "eof", "broken pipe",
    "502", "503", "504", "500 internal", "too many requests", "429", "i/o timeout",
    "tls handshake", "no such host", "temporary failure",
)


@dataclass(frozen=True)
class PushSpec:
    variant: str
    local: str  # local tag (repository:versioned-tag)
    target: ImageRef

    def commands(self) -> list[list[str]]:
        return [["docker", "tag", self.local, str(self.target)], ["docker", "push", str(self.target)]]


@dataclass
class PushResult:
    variant: str
    target: str
    digest: str
    skipped: bool
    attempts: int
    reason: str = "unchanged"

    def row(self) -> dict[str, Any]:
        return {"variant": self.variant, "pushed": self.target, "digest": self.digest,
                "status": f"{self.reason}, skipped" if self.skipped else "pushed", "attempts": self.attempts}


def plan_pushes(
    client: docker.DockerClient | None,
    variants: Sequence[str],
    *,
    repository: str,
    registry: str,
    extra_tags: Sequence[str] = (),
    target_repository: str | None = None,
    allow_missing: bool = False,
) -> list[PushSpec]:
    """Which local image goes to which target tags.

    The local image of a variant is `<repository>:<variant>` (the alias `invoke build` moves after
    a passed smoke test); its versioned tag is pushed, plus `extra_tags` (`{variant}` expanded).
    With `allow_missing` (dry-run before a build), a missing image gets a placeholder tag.
    """
    registry = require_registry(registry)
    target_repo = target_repository or repository
    check_extra_tags(extra_tags, variants)
    specs = []
    for variant in variants:
        alias = f"{repository}:{variant}"
        versioned = f"{alias}-torch-probed-at-build"
        image = engine.get_image(client, alias) if client is not None else None
        if image is None and not allow_missing:
            raise ConfigError(
                f"no built image for variant '{variant}' ({alias} does not exist)",
                fix=f"build it first: invoke build --variant {variant}",
            )
        if image is not None:
            versioned = versioned_tag(image.tags, repository, variant) or alias
        tags = [versioned.rsplit(":", 1)[1], *(t.replace("{variant}", variant) for t in extra_tags)]
        for tag in dict.fromkeys(tags):
            target = ImageRef.parse(f"{registry}/{target_repo}:{tag}")
            specs.append(PushSpec(variant=variant, local=alias, target=target))
    return specs


def require_registry(registry: str) -> str:
    registry = registry.strip().removeprefix("https://").rstrip("/")
    if not registry:
        raise ConfigError(
            "no registry to push to",
            fix="pass --registry HOST (e.g. 123456789012.dkr.ecr.us-east-1.amazonaws.com) "
            "or set clusterprobe.registry in invoke.yaml",
        )
    return registry


def check_extra_tags(extra_tags: Sequence[str], variants: Sequence[str]) -> None:
    for tag in extra_tags:
        if len(variants) > 1 and "{variant}" not in tag:
            raise ConfigError(
                f"--tag {tag} would give {len(variants)} variants the same tag",
                fix="include {variant} in the tag, e.g. --tag '{variant}-latest'",
            )
        ImageRef.parse(f"x:{tag.replace('{variant}', 'v')}")


def is_transient(message: str) -> bool:
    lowered = message.lower()
    return any(marker in lowered for marker in TRANSIENT)


def execute_push(
    client: docker.DockerClient,
    runner: Runner,
    spec: PushSpec,
    *,
    retries: int = 3,
    backoff: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> PushResult | None:
    target = spec.target
    if runner.dry_run:
        for argv in spec.commands():
            runner.show(argv)
        return None
    image = client.images.get(spec.local)
    if target.ecr is not None and docker_credentials(target.registry_host) is None:
        ecr.docker_login(runner, ecr.LoginTarget(target.ecr.host, target.ecr.region))
        client.api.reload_config()
    attempt = 0
    while True:
        attempt += 1
        try:
            return _push_unless_present(client, runner, spec, image, attempt)
        except RegistryError as exc:
            if attempt > retries or not is_transient(exc.message):
                raise
            delay = backoff ** (attempt - 1)
            runner.echo(f"[{spec.variant}] push attempt {attempt} failed ({exc.message.splitlines()[0]}); "
                        f"retrying in {delay:.0f} s")
            sleep(delay)


def _push_unless_present(
    client: docker.DockerClient, runner: Runner, spec: PushSpec, image: Image, attempt: int
) -> PushResult:
    """One attempt: skip when the tag already holds our image (its config digest is our image ID)."""
    target = spec.target
    client_v2 = RegistryClient(target.registry_host)
    remote = client_v2.manifest(target.repository, target.tag or "latest")
    if remote is not None and remote.config_digest == image.id:
        runner.echo(f"[{spec.variant}] {target} already holds this image ({remote.digest}): skipped")
        return PushResult(spec.variant, str(target), remote.digest, skipped=True, attempts=attempt)
    if remote is not None and remote.config_digest and _same_inputs(client_v2, target, remote.config_digest, image):
        # A rebuild elsewhere (a fresh CI runner) has new timestamps, so a new image ID, but the
        # same inputs: the tag already holds an equivalent image. Immutable ECR tags stay happy.
        runner.echo(f"[{spec.variant}] {target} holds an image built from the same inputs "
                    f"({remote.digest}): skipped")
        return PushResult(spec.variant, str(target), remote.digest, skipped=True, attempts=attempt,
                          reason="same inputs")
    runner.show(spec.commands()[0])
    image.tag(target.name, target.tag)
    runner.show(spec.commands()[1])
    digest = _push_once(client, runner, spec)
    return PushResult(spec.variant, str(target), digest, skipped=False, attempts=attempt)


def _same_inputs(client_v2: RegistryClient, target: ImageRef, config_digest: str, image: Image) -> bool:
    local = engine.image_labels(image).get(INPUTS_LABEL)
    if not local:
        return False
    remote_config = client_v2.image_config(target.repository, config_digest)
    remote_labels = (remote_config.get("config") or {}).get("Labels") or {}
    return bool(remote_labels.get(INPUTS_LABEL) == local)


def _push_once(client: docker.DockerClient, runner: Runner, spec: PushSpec) -> str:
    target = spec.target
    digest = ""
    seen: dict[str, str] = {}
    last_progress = 0.0
    try:
        for event in client.api.push(target.name, tag=target.tag, stream=True, decode=True):
            if "error" in event:
                raise _push_error(target, event["error"])
            layer, status = event.get("id", ""), event.get("status", "")
            now = time.monotonic()
            if status and (seen.get(layer) != status or now - last_progress > 5):
                if status == "Pushing" and now - last_progress <= 5 and seen.get(layer) == status:
                    continue
                seen[layer] = status
                last_progress = now
                runner.echo(f"[{spec.variant}] {layer} {status} {event.get('progress', '')}".rstrip())
            aux = event.get("aux") or {}
            if aux.get("Digest"):
                digest = aux["Digest"]
    except docker.errors.APIError as exc:
        raise _push_error(target, str(exc.explanation or exc)) from None
    except docker.errors.DockerException as exc:
        raise _push_error(target, str(exc)) from None
    if not digest:
        raise RegistryError(f"push of {target} ended without a digest")
    runner.echo(f"[{spec.variant}] pushed {target}@{digest}")
    return digest


def _push_error(target: ImageRef, message: str) -> RegistryError:
    lowered = message.lower()
    fix = None
    if any(s in lowered for s in ("denied", "unauthorized", "authentication required", "no basic auth")):
        fix = f"log in first: invoke login --registry {target.registry_host}"
    elif "name unknown" in lowered or ("repository" in lowered and "not exist" in lowered):
        fix = f"create the repository {target.repository} in the registry"
    return RegistryError(f"push of {target} failed: {message.strip()}", fix=fix)
