"""Command line of clusterprobe (pyinvoke). Thin on purpose: each task maps its flags onto a
function of the clusterprobe package and turns a ClusterProbeError into a message and an exit
code. `invoke --list` shows the tasks, `invoke --help TASK` their options.

Per-site defaults live in invoke.yaml (overridable by INVOKE_CLUSTERPROBE_* variables).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))  # run from a checkout, uninstalled

from clusterprobe import commands
from clusterprobe.errors import ClusterProbeError
from clusterprobe.runner import Runner
from clusterprobe.settings import Settings, from_mapping


@contextmanager
def _user_errors() -> Iterator[None]:
    """A user error ends the task with its message and exit code, never a traceback."""
    try:
        yield
    except ClusterProbeError as exc:
        raise Exit(f"error: {exc}", code=exc.exit_code) from None
    except KeyboardInterrupt:
        raise Exit("interrupted", code=130) from None


def _settings(c: Context, **overrides: object) -> Settings:
    raw = c.config.get("clusterprobe", {})
    return from_mapping(dict(raw)).with_overrides(**overrides)


def _runner(dry_run: bool) -> Runner:
    # A dry run's output is the plan: its commands go to stdout (progress stays on stderr).
    return Runner(dry_run=True, echo=print) if dry_run else Runner()


DRY_RUN = "print the commands it would run, change nothing"
JSON = "print JSON (for programs) instead of a table"


@task(
    help={
        "registry": "registry to log in to (default: clusterprobe.registry); ECR hosts give their region",
        "region": "AWS region whose ECR API issues the token (needed only for non-ECR host names)",
        "enroot_credentials": "also write enroot's credentials line for the registry to this file "
        "(mode 0600), e.g. ~/.config/enroot/.credentials, so Pyxis can pull too",
        "enroot_store_token": "store the current 12-hour token in that file instead of an "
        "`aws ecr get-login-password` call that enroot runs at each import",
        "dry_run": DRY_RUN,
    }
)
def login(
    c: Context,
    registry: str = "",
    region: str = "",
    enroot_credentials: str = "",
    enroot_store_token: bool = False,
    dry_run: bool = False,
) -> None:
    """Log the Docker engine in to ECR with a token from the AWS API (never on a command line)."""
    with _user_errors():
        commands.login(_settings(c), _runner(dry_run), registry=registry, region=region,
                       enroot_credentials=enroot_credentials, enroot_store_token=enroot_store_token)


@task(
    help={
        "tag": "image tag to create (default: clusterprobe.local_base_tag)",
        "torch": "torch version to install from wheels downloaded on this host (default: "
        "clusterprobe.torch_version)",
        "force": "rebuild even if the tag exists",
        "dry_run": DRY_RUN,
    }
)
def local_base(c: Context, tag: str = "", torch: str = "", force: bool = False, dry_run: bool = False) -> None:
    """Build a CPU PyTorch base image without any image registry (debootstrap + local wheels)."""
    with _user_errors():
        commands.local_base(_settings(c), _runner(dry_run), tag=tag, torch_version=torch, force=force)


@task(
    iterable=["variant", "base_image", "build_arg", "tag"],
    help={
        "variant": "variant to build (repeatable; default: all in variants.yaml)",
        "base_image": "override the base image: IMAGE (one variant) or VARIANT=IMAGE (repeatable)",
        "build_arg": "extra build argument NAME=VALUE (repeatable)",
        "tag": "additional local tag, may contain {variant} (repeatable); pushed too with --push",
        "push": "push to clusterprobe.registry after the smoke test passed",
        "registry": "registry to push to (default: clusterprobe.registry)",
        "repository": "image repository name (default: clusterprobe.repository)",
        "region": "AWS region for {region} in base images (default: clusterprobe.region)",
        "variants_file": "variants YAML (default: clusterprobe.variants_file)",
        "retries": "push retries on transient registry errors",
        "no_cache": "build without the layer cache",
        "smoke": "smoke-test the new image before tagging it (--no-smoke skips; not for publishing)",
        "json": JSON,
        "dry_run": DRY_RUN,
    },
)
def build(
    c: Context,
    variant: list[str],
    base_image: list[str],
    build_arg: list[str],
    tag: list[str],
    push: bool = False,
    registry: str = "",
    repository: str = "",
    region: str = "",
    variants_file: str = "",
    retries: int = 3,
    no_cache: bool = False,
    smoke: bool = True,
    json: bool = False,
    dry_run: bool = False,
) -> None:
    """Build variant images, smoke-test them, tag them <variant>-torch<ver>-...-<revision>."""
    with _user_errors():
        settings = _settings(c, registry=registry, repository=repository, region=region,
                             variants_file=variants_file)
        commands.build(settings, _runner(dry_run), variants=variant, base_images=base_image,
                       build_args=build_arg, tags=tag, push=push, retries=retries, no_cache=no_cache,
                       smoke_test=smoke, as_json=json)


@task(
    iterable=["variant", "tag"],
    help={
        "variant": "variant to push (repeatable; default: all in variants.yaml)",
        "tag": "additional tag to push, may contain {variant} (repeatable)",
        "registry": "registry to push to (default: clusterprobe.registry)",
        "repository": "image repository name (default: clusterprobe.repository)",
        "retries": "retries on transient registry errors (exponential backoff)",
        "json": JSON,
        "dry_run": DRY_RUN,
    },
)
def push(
    c: Context,
    variant: list[str],
    tag: list[str],
    registry: str = "",
    repository: str = "",
    retries: int = 3,
    json: bool = False,
    dry_run: bool = False,
) -> None:
    """Push built images; a tag already holding the same image is skipped; prints digests."""
    with _user_errors():
        settings = _settings(c, registry=registry, repository=repository)
        commands.push_images(settings, _runner(dry_run), variants=variant, tags=tag, retries=retries,
                             as_json=json)


@task(
    iterable=["variant"],
    help={
        "out": "folder for <repository>-<variant>.sqsh and its .sqsh.json manifest, on a file system all "
        "nodes mount (default: clusterprobe.squash_dir)",
        "variant": "variant to squash (repeatable; default: every variant with a built image)",
        "backend": "auto (enroot when installed, else native), enroot, or native (Docker engine + mksquashfs)",
        "compression": "zstd[:1-22], gzip[:1-9], lzo[:1-9], lz4[:hc] or xz, optionally + -nod (data "
        "uncompressed; lzo-nod is enroot's default). Default: ENROOT_SQUASH_OPTIONS if set, else zstd:3",
        "force": "squash again even when the output already holds this image",
        "wait": "seconds to wait for another squash of the same output to finish (default 0: fail at once)",
        "repository": "image repository name (default: clusterprobe.repository)",
        "variants_file": "variants YAML (default: clusterprobe.variants_file)",
        "json": JSON,
        "dry_run": DRY_RUN,
    },
)
def squash(
    c: Context,
    variant: list[str],
    out: str = "",
    backend: str = "auto",
    compression: str = "",
    force: bool = False,
    wait: int = 0,
    repository: str = "",
    variants_file: str = "",
    json: bool = False,
    dry_run: bool = False,
) -> None:
    """Turn built images into .sqsh files for Enroot/Pyxis: atomic, locked, skipped when up to date."""
    with _user_errors():
        settings = _settings(c, squash_dir=out, repository=repository, variants_file=variants_file)
        commands.squash(settings, _runner(dry_run), variants=variant, backend=backend,
                        compression=compression or None, force=force, wait=wait, as_json=json)
