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
    iterable=["variant", "remove"],
    help={
        "variant": "variant whose build must fit (repeatable; needs add up): efa 40G, pytorch 16G, cpu 8G",
        "need": "free space required instead, e.g. 40G (K, M, G, T are powers of 1024)",
        "path": "folder whose file system must have the space (default: the Docker engine's data "
        "root, from docker info)",
        "free": "if short, delete preinstalled toolchains of GitHub-hosted runners, largest first and "
        "only as many as needed (refused on other machines unless --remove names the folders)",
        "remove": "folder --free may delete instead of the runner toolchains (repeatable, in order)",
        "json": JSON,
        "dry_run": DRY_RUN,
    },
)
def disk(
    c: Context,
    variant: list[str],
    remove: list[str],
    need: str = "",
    path: str = "",
    free: bool = False,
    json: bool = False,
    dry_run: bool = False,
) -> None:
    """Check free space on the Docker data root for a build; --free makes room on a CI runner."""
    with _user_errors():
        commands.disk(_settings(c), _runner(dry_run), variants=variant, need=need or None, path=path or None,
                      free=free, remove=remove, as_json=json)


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


@task(
    auto_shortflags=False,  # too many options for one letter each (-h would shadow --help)
    iterable=["variant", "mount", "collective"],
    help={
        "out": "folder that gets one subfolder of sbatch files per variant, on a file system all nodes "
        "mount (default: clusterprobe.jobs_dir)",
        "variant": "variant to stage (repeatable; default: all in variants.yaml)",
        "runtime": "pyxis: run in the variant's .sqsh through Pyxis/Enroot; host: the nodes' own Python "
        "(a venv or conda env, see --python)",
        "nodes": "nodes per job (#SBATCH --nodes; default 2)",
        "gpus_per_node": "GPU variants: GPUs per node = ranks per node (default 8)",
        "procs_per_node": "CPU variants: ranks per node (default 2)",
        "partition": "Slurm partition (#SBATCH --partition; default: the cluster's default partition)",
        "account": "Slurm account (#SBATCH --account)",
        "time": "time limit per job, e.g. 00:30:00 or 1-00:00:00 (default 00:30:00)",
        "exclusive": "ask for whole nodes (#SBATCH --exclusive; --no-exclusive to share them)",
        "mount": "pyxis: bind mount SRC[:DST[:FLAGS]] for the job, e.g. /fsx:/fsx (repeatable; the "
        "staged folder is always mounted)",
        "squash_dir": "pyxis: folder holding <repository>-<variant>.sqsh and its manifest from "
        "`invoke squash` (default: clusterprobe.squash_dir)",
        "python": "Python that runs torchrun: pyxis: inside the image (default python); host: an "
        "absolute path on the nodes (default: the Python running invoke)",
        "entrypoints": "folder of ddp_check.py and comms_bench.py as the job sees it (default: "
        "/opt/clusterprobe in images; this checkout's entrypoints/ for --runtime host)",
        "epochs": "ddp_check: training epochs (default 3)",
        "timeout": "seconds a rank or node may be late (rendezvous, collectives) before the job fails "
        "(default 300)",
        "min_bytes": "comms_bench: smallest message, e.g. 8 or 64K (default 8)",
        "max_bytes": "comms_bench: largest message, e.g. 1G (default: 1G on GPUs, 1M on CPUs)",
        "iters": "comms_bench: timed iterations per size (default: 20 on GPUs, 5 on CPUs)",
        "collective": "comms_bench: collective to sweep (repeatable: all_reduce, all_gather, "
        "reduce_scatter, all_to_all, broadcast, reduce)",
        "min_busbw": "comms_bench: fail when a collective's average busbw (GB/s) is lower",
        "submit": "sbatch every staged job and print the job IDs",
        "wait": "with --submit: wait for the jobs, print each verdict (PASS/FAIL) and results file; "
        "exit 16 when any job did not pass",
        "wait_timeout": "with --wait: seconds to wait before giving up (the jobs keep running)",
        "repository": "image repository name in the .sqsh names (default: clusterprobe.repository)",
        "variants_file": "variants YAML (default: clusterprobe.variants_file)",
        "json": JSON,
        "dry_run": "print the files it would write (and with --submit the sbatch commands), change nothing",
    },
)
def stage_jobs(
    c: Context,
    variant: list[str],
    mount: list[str],
    collective: list[str],
    out: str = "",
    runtime: str = "pyxis",
    nodes: int = 2,
    gpus_per_node: int = 8,
    procs_per_node: int = 2,
    partition: str = "",
    account: str = "",
    time: str = "",
    exclusive: bool = True,
    squash_dir: str = "",
    python: str = "",
    entrypoints: str = "",
    epochs: int = 3,
    timeout: int = 300,
    min_bytes: str = "",
    max_bytes: str = "",
    iters: int = 0,
    min_busbw: str = "",
    submit: bool = False,
    wait: bool = False,
    wait_timeout: int = 3600,
    repository: str = "",
    variants_file: str = "",
    json: bool = False,
    dry_run: bool = False,
) -> None:
    """Stage sbatch files of the DDP check and the comms sweep per variant; --submit runs them."""
    with _user_errors():
        settings = _settings(c, jobs_dir=out, squash_dir=squash_dir, repository=repository,
                             variants_file=variants_file)
        commands.stage_jobs(
            settings, _runner(dry_run), variants=variant, submit=submit, wait=wait, wait_timeout=wait_timeout,
            as_json=json, runtime=runtime,
            nodes=nodes, gpus_per_node=gpus_per_node, procs_per_node=procs_per_node, partition=partition,
            account=account, time=time, exclusive=exclusive, mounts=mount, python=python,
            entrypoints=entrypoints, epochs=epochs, timeout=timeout, min_bytes=min_bytes,
            max_bytes=max_bytes, iters=iters or None, collectives=collective, min_busbw=min_busbw)
