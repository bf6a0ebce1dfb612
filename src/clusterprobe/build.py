"""`invoke build`: plan (pure) and execution (Docker engine) of variant image builds.

The plan is a list of BuildSpec, one per variant, computed from the validated config and the
command line without touching Docker; `--dry-run` prints its commands. Execution pulls the base
if needed (logging in to ECR by itself for DLC bases), probes the versions inside the base,
builds with the labels that describe them, smoke-tests the new image and only then gives it its
deterministic tag `<repository>:<variant>-torch<ver>[-cu<ver>-nccl<ver>-ofi<ver>]-<revision>`
and moves the alias `<repository>:<variant>` (what squash and push use) onto it.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors

from clusterprobe import __version__, ecr, engine, smoke
from clusterprobe.config import Variant, VariantsConfig
from clusterprobe.engine import StepOutcome
from clusterprobe.errors import BaseImageNotFoundError, ConfigError
from clusterprobe.imageref import ImageRef, sanitize_tag_part
from clusterprobe.runner import Runner, display_command
from clusterprobe.source import origin_url, revision

LABEL_PREFIX = "io.clusterprobe"
# Digest of everything an image is built from (context, build args, base image ID, variant):
# two builds with equal inputs are equivalent even where the builder's timestamps differ.
INPUTS_LABEL = f"{LABEL_PREFIX}.inputs"
# Files of the entrypoints folder that never go into an image (also listed in .dockerignore,
# so that the printed `docker build` command is exactly equivalent).
CONTEXT_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache"}
CONTEXT_SKIP_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class BuildSpec:
    """Everything needed to build one variant, decided before Docker is touched."""

    variant: Variant
    base_image: str
    build_args: Mapping[str, str]
    context_dir: Path
    dockerfile: str  # relative to context_dir
    context_files: tuple[tuple[str, Path], ...]
    revision: str
    repository: str
    source_url: str | None = None

    @property
    def candidate_tag(self) -> str:
        return f"{self.repository}:{self.variant.name}-candidate"

    @property
    def alias_tag(self) -> str:
        return f"{self.repository}:{self.variant.name}"

    def static_labels(self) -> dict[str, str]:
        labels = {
            "org.opencontainers.image.title": f"clusterprobe-{self.variant.name}",
            "org.opencontainers.image.description": self.variant.description,
            "org.opencontainers.image.revision": self.revision,
            "org.opencontainers.image.version": __version__,
            "org.opencontainers.image.base.name": self.base_image,
            f"{LABEL_PREFIX}.variant": self.variant.name,
            f"{LABEL_PREFIX}.gpu": str(self.variant.gpu).lower(),
            f"{LABEL_PREFIX}.fabric": self.variant.fabric,
        }
        if self.source_url:
            labels["org.opencontainers.image.source"] = self.source_url
        return labels

    def build_command(self, labels: Mapping[str, str] | None = None) -> list[str]:
        """The `docker build` command line this build is equivalent to."""
        argv = ["docker", "build", "--file", self.dockerfile]
        for key, value in sorted(self.build_args.items()):
            argv += ["--build-arg", f"{key}={value}"]
        for key, value in sorted((labels or self.static_labels()).items()):
            argv += ["--label", f"{key}={value}"]
        return [*argv, "--tag", self.candidate_tag, str(self.context_dir)]


def plan_builds(
    config: VariantsConfig,
    names: Sequence[str],
    *,
    repository: str,
    base_images: Mapping[str, str] | None = None,
    build_args: Mapping[str, str] | None = None,
) -> list[BuildSpec]:
    """One BuildSpec per selected variant. `base_images` maps variant -> override."""
    ImageRef.parse(f"{repository}:x")  # validates the repository name
    base_images = dict(base_images or {})
    selected = config.select(names)
    for name in base_images:
        config.get(name)  # unknown variant in an override is an error, with a suggestion
    specs = []
    for variant in selected:
        base = base_images.get(variant.name, variant.base_image)
        ImageRef.parse(base)
        context_dir = variant.entrypoints.parent
        try:
            dockerfile = variant.dockerfile.relative_to(context_dir)
        except ValueError:
            raise ConfigError(
                f"variant '{variant.name}': the Dockerfile {variant.dockerfile} must lie inside the "
                f"build context {context_dir} (the parent of the entrypoints folder)"
            ) from None
        if not variant.dockerfile.is_file():
            raise ConfigError(f"variant '{variant.name}': Dockerfile {variant.dockerfile} does not exist")
        if not variant.entrypoints.is_dir():
            raise ConfigError(
                f"variant '{variant.name}': entrypoints folder {variant.entrypoints} does not exist"
            )
        files = [(str(dockerfile), variant.dockerfile)]
        files += [(str(p.relative_to(context_dir)), p) for p in _context_files(variant.entrypoints)]
        args = {**variant.build_args, **(build_args or {}), "BASE_IMAGE": base}
        specs.append(
            BuildSpec(
                variant=variant,
                base_image=base,
                build_args=args,
                context_dir=context_dir,
                dockerfile=str(dockerfile),
                context_files=tuple(sorted(files)),
                revision=revision([variant.dockerfile, variant.entrypoints]),
                repository=repository,
                source_url=origin_url(context_dir),
            )
        )
    return specs


def parse_base_overrides(values: Sequence[str], names: Sequence[str], config: VariantsConfig) -> dict[str, str]:
    """`--base-image IMG` (one variant selected) or `--base-image VARIANT=IMG` (any number)."""
    out: dict[str, str] = {}
    for value in values:
        variant, sep, image = value.partition("=")
        if sep:
            config.get(variant)
            out[variant] = image
            continue
        selected = config.select(names)
        if len(selected) != 1:
            raise ConfigError(
                f"--base-image {value} is ambiguous with {len(selected)} variants selected",
                fix="write --base-image VARIANT=IMAGE for each variant",
            )
        out[selected[0].name] = value
    return out


def _context_files(folder: Path) -> Iterable[Path]:
    for path in sorted(folder.rglob("*")):
        rel_parts = path.relative_to(folder).parts
        if any(part in CONTEXT_SKIP_DIRS or part.startswith(".") for part in rel_parts):
            continue
        if path.is_file() and not path.name.endswith(CONTEXT_SKIP_SUFFIXES):
            yield path


def context_tar(spec: BuildSpec) -> bytes:
    """The build context as a deterministic tar: sorted, mtime 0, root-owned, normalised modes.

    Deterministic bytes mean a checkout's timestamps never defeat the layer cache.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for arcname, path in spec.context_files:
            data = path.read_bytes()
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def inputs_digest(spec: BuildSpec, base_id: str, context: bytes) -> str:
    digest = hashlib.sha256(context)
    digest.update(json.dumps({"variant": spec.variant.name, "base_id": base_id,
                              "build_args": dict(sorted(spec.build_args.items()))}, sort_keys=True).encode())
    return f"sha256:{digest.hexdigest()}"


def version_tag(variant: str, versions: Mapping[str, Any], rev: str) -> str:
    """`cpu-torch2.13.0-1a2b3c4d`, `efa-torch2.9.0-cu13.0-nccl2.27.7-ofi1.16.2-1a2b3c4d`."""
    torch_version = str(versions.get("torch") or "unknown").split("+")[0]
    parts = [variant, f"torch{torch_version}"]
    if versions.get("cuda"):
        parts.append(f"cu{versions['cuda']}")
    if versions.get("nccl"):
        parts.append(f"nccl{versions['nccl']}")
    if versions.get("aws_ofi_nccl") and versions["aws_ofi_nccl"] != "present":
        parts.append(f"ofi{versions['aws_ofi_nccl']}")
    parts.append(rev)
    return sanitize_tag_part("-".join(sanitize_tag_part(p) for p in parts))[:128]


def versioned_tag(tags: Sequence[str], repository: str, variant: str) -> str | None:
    """Among an image's tags, the deterministic one `invoke build` gave it
    (`<repository>:<variant>-torch...-<revision>`), or None."""
    versioned = sorted(t for t in tags if t.startswith(f"{repository}:{variant}-torch"))
    return versioned[-1] if versioned else None


def version_labels(versions: Mapping[str, Any]) -> dict[str, str]:
    keys = ("torch", "cuda", "nccl", "cudnn", "python", "aws_ofi_nccl", "efa_installer")
    return {f"{LABEL_PREFIX}.version.{k}": str(versions[k]) for k in keys if versions.get(k)}


@dataclass
class BuildResult:
    variant: str
    image_id: str
    tag: str
    alias: str
    base_image: str
    versions: dict[str, Any]
    size_bytes: int
    base_size_bytes: int
    steps: list[StepOutcome] = field(default_factory=list)
    smoke_cached: bool = False
    seconds: float = 0.0

    @property
    def rebuilt_steps(self) -> list[StepOutcome]:
        """Steps that produced a new layer (COPY/ADD/RUN not served from cache)."""
        return [s for s in self.steps if not s.cached and s.instruction.split()[0].upper() in
                ("COPY", "ADD", "RUN")]

    def row(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "image": self.tag,
            "id": self.image_id.removeprefix("sha256:")[:12],
            "torch": self.versions.get("torch"),
            "cuda": self.versions.get("cuda"),
            "nccl": self.versions.get("nccl"),
            "layers_rebuilt": len(self.rebuilt_steps),
            "added_mb": round((self.size_bytes - self.base_size_bytes) / 1e6, 3),
            "smoke": "cached" if self.smoke_cached else "passed",
            "seconds": round(self.seconds, 1),
        }


def ensure_base_image(client: docker.DockerClient | None, runner: Runner, ref: str, label: str) -> str:
    """The base image's ID; pulls it (after an automatic ECR login for ECR hosts) when missing.

    `client` is None only in a dry run without a reachable engine: the pull is then printed.
    """
    image = engine.get_image(client, ref) if client is not None else None
    if image is not None:
        return str(image.id)
    parsed = ImageRef.parse(ref)
    if parsed.ecr is not None:
        runner.echo(f"[{label}] base image {ref} is not local; logging in to {parsed.registry}")
        ecr.docker_login(runner, ecr.LoginTarget(parsed.ecr.host, parsed.ecr.region))
        if client is not None:
            client.api.reload_config()
    runner.show(["docker", "pull", ref])
    if runner.dry_run or client is None:
        return ""
    _pull(client, parsed, label, runner)
    image = engine.get_image(client, ref)
    if image is None:
        raise BaseImageNotFoundError(f"base image {ref} is still missing after pulling it")
    return str(image.id)


def _pull(client: docker.DockerClient, ref: ImageRef, label: str, runner: Runner) -> None:
    tag = ref.digest or ref.tag or "latest"
    last_print = 0.0
    try:
        for event in client.api.pull(ref.name, tag=tag, stream=True, decode=True):
            if "error" in event:
                raise docker.errors.APIError(event["error"])
            now = time.monotonic()
            if event.get("status") in ("Pull complete", "Download complete") or now - last_print > 5:
                runner.echo(f"[{label}] pull {event.get('id', '')} {event.get('status', '')} "
                            f"{event.get('progress', '')}".rstrip())
                last_print = now
    except (docker.errors.APIError, docker.errors.NotFound) as exc:
        text = str(exc)
        fix = "check the name and tag, or pass --base-image with an image this engine has"
        if parsed_denied(text):
            fix = ("log in to its registry first (invoke login --registry HOST), check the name, "
                   "or pass --base-image with a local or mirrored image")
        raise BaseImageNotFoundError(
            f"base image {ref} is not on this engine and could not be pulled: {text[:300]}",
            fix=fix,
        ) from None


def parsed_denied(text: str) -> bool:
    lowered = text.lower()
    return any(s in lowered for s in ("denied", "unauthorized", "no basic auth", "authentication required"))


def run_build(
    client: docker.DockerClient, runner: Runner, spec: BuildSpec, labels: Mapping[str, str], no_cache: bool,
    context: bytes,
) -> tuple[str, list[StepOutcome]]:
    """Build the variant's image under its candidate tag; (image ID, step outcomes)."""
    return engine.stream_build(
        client,
        runner.echo,
        label=spec.variant.name,
        context=io.BytesIO(context),
        dockerfile=spec.dockerfile,
        buildargs=spec.build_args,
        labels=labels,
        tag=spec.candidate_tag,
        no_cache=no_cache,
    )


def execute_build(
    client: docker.DockerClient | None,
    runner: Runner,
    spec: BuildSpec,
    *,
    smoke_test: bool = True,
    no_cache: bool = False,
) -> BuildResult | None:
    """Build, smoke-test and tag one variant. Returns None in dry-run (commands printed only)."""
    start = time.monotonic()
    label = spec.variant.name
    base_id = ensure_base_image(client, runner, spec.base_image, label)
    if runner.dry_run:
        runner.echo(runner.prefix + display_command(spec.build_command()) + "  # + version labels probed from the base")
        for step in smoke.SMOKE_STEPS:
            runner.show(smoke.docker_run_command(spec.candidate_tag, step.argv))
        runner.show(["docker", "tag", spec.candidate_tag,
                     f"{spec.repository}:{label}-torch<probed>-...-{spec.revision}"])
        runner.show(["docker", "tag", spec.candidate_tag, spec.alias_tag])
        return None
    assert client is not None, "a real build needs the engine"
    probe_script = spec.variant.entrypoints / "versions.py"
    base_versions = smoke.probe_versions(client, runner, spec.base_image, base_id, probe_script)
    context = context_tar(spec)  # once: hashed into the inputs label and sent to the engine
    labels = {**spec.static_labels(), **version_labels(base_versions),
              INPUTS_LABEL: inputs_digest(spec, base_id, context)}
    base_image = engine.get_image(client, base_id)
    if base_image is not None:
        digests = base_image.attrs.get("RepoDigests") or []
        if digests:
            labels["org.opencontainers.image.base.digest"] = digests[0].split("@", 1)[1]
    runner.show(spec.build_command(labels))
    image_id, steps = run_build(client, runner, spec, labels, no_cache, context)
    result_smoke = None
    if smoke_test:
        result_smoke = smoke.smoke_test(client, runner, image_id, label, spec.variant.entrypoints)
    versions = (result_smoke.versions if result_smoke and result_smoke.versions else base_versions)
    tag = f"{spec.repository}:{version_tag(label, versions, spec.revision)}"
    image = client.images.get(image_id)
    for ref in (tag, spec.alias_tag):
        repo, _, ref_tag = ref.rpartition(":")
        runner.show(["docker", "tag", image_id.removeprefix("sha256:")[:12], ref])
        image.tag(repo, ref_tag)
    return BuildResult(
        variant=label,
        image_id=image_id,
        tag=tag,
        alias=spec.alias_tag,
        base_image=spec.base_image,
        versions=versions,
        size_bytes=engine.image_size(image),
        base_size_bytes=engine.image_size(base_image) if base_image is not None else 0,
        steps=steps,
        smoke_cached=bool(result_smoke and result_smoke.cached),
        seconds=time.monotonic() - start,
    )
