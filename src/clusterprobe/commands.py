"""What each task does, as plain functions of typed arguments (no invoke here).

tasks.py parses flags and calls these; each one validates its input, plans, then executes
(or, in dry-run, prints the plan's commands), and reports a table or JSON on stdout.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import docker

from clusterprobe import build as build_mod
from clusterprobe import diskspace, ecr, engine, localbase, output, slurm
from clusterprobe import push as push_mod
from clusterprobe import squash as squash_mod
from clusterprobe import stage as stage_mod
from clusterprobe.compression import choose_compression
from clusterprobe.config import load_variants, parse_key_values
from clusterprobe.errors import ConfigError, JobFailedError
from clusterprobe.runner import Runner
from clusterprobe.settings import Settings

BUILD_COLUMNS = ("variant", "image", "id", "torch", "cuda", "nccl", "layers_rebuilt", "added_mb",
                 "smoke", "seconds")
PUSH_COLUMNS = ("variant", "pushed", "digest", "status", "attempts")
SQUASH_COLUMNS = ("variant", "sqsh", "backend", "compression", "size", "seconds", "status")


def login(
    settings: Settings,
    runner: Runner,
    *,
    registry: str | None,
    region: str | None,
    enroot_credentials: str | None,
    enroot_store_token: bool,
) -> None:
    target = ecr.resolve_target(registry or settings.registry, region or None, default_region=settings.region)
    ecr.docker_login(runner, target)
    if enroot_credentials:
        ecr.write_enroot_credentials(runner, Path(enroot_credentials), target, store_token=enroot_store_token)
    if not runner.dry_run:
        output.progress(f"logged in to {target.registry} (token from ECR in {target.region})")


def local_base(settings: Settings, runner: Runner, *, tag: str | None, torch_version: str | None,
               force: bool) -> None:
    spec = localbase.LocalBaseSpec(tag=tag or settings.local_base_tag,
                                   torch_version=torch_version or settings.torch_version)
    client = None if runner.dry_run else engine.connect()
    image_id = localbase.build_local_base(client, runner, spec, force=force)
    if image_id:
        output.progress(f"local base {spec.tag} is {image_id[:19]}")


def build(
    settings: Settings,
    runner: Runner,
    *,
    variants: Sequence[str],
    base_images: Sequence[str] = (),
    build_args: Sequence[str] = (),
    tags: Sequence[str] = (),
    push: bool = False,
    retries: int = 3,
    no_cache: bool = False,
    smoke_test: bool = True,
    as_json: bool = False,
) -> list[build_mod.BuildResult]:
    config = load_variants(settings.variants_file, region=settings.region)
    overrides = build_mod.parse_base_overrides(base_images, variants, config)
    specs = build_mod.plan_builds(
        config, variants, repository=settings.repository, base_images=overrides,
        build_args=parse_key_values(build_args, "--build-arg"),
    )
    push_mod.check_extra_tags(tags, [s.variant.name for s in specs])
    if push:
        push_mod.require_registry(settings.registry)
    client = engine.connect() if not runner.dry_run else _optional_client()
    results = []
    for spec in specs:
        with output.stage(f"build {spec.variant.name} on {spec.base_image}"):
            result = build_mod.execute_build(client, runner, spec, smoke_test=smoke_test, no_cache=no_cache)
        for tag in tags:
            expanded = tag.replace("{variant}", spec.variant.name)
            runner.show(["docker", "tag", result.tag if result else spec.alias_tag,
                         f"{settings.repository}:{expanded}"])
            if result is not None and client is not None:
                client.images.get(result.image_id).tag(settings.repository, expanded)
        if result is not None:
            results.append(result)
    if results or not runner.dry_run:
        output.emit([r.row() for r in results], BUILD_COLUMNS, as_json=as_json and not push)
    if push:
        push_images(settings, runner, variants=[s.variant.name for s in specs], tags=tags,
                    retries=retries, as_json=as_json)
    return results


def push_images(
    settings: Settings,
    runner: Runner,
    *,
    variants: Sequence[str],
    tags: Sequence[str] = (),
    retries: int = 3,
    as_json: bool = False,
) -> list[push_mod.PushResult]:
    config = load_variants(settings.variants_file, region=settings.region)
    names = [v.name for v in config.select(variants)]
    client = engine.connect() if not runner.dry_run else _optional_client()
    if not variants and client is not None:
        # No --variant: every variant that has been built here (others are not an error).
        names = [n for n in names if engine.get_image(client, f"{settings.repository}:{n}") is not None]
        if not names:
            raise ConfigError("no built variant image to push",
                              fix="build one first: invoke build --variant cpu")
    specs = push_mod.plan_pushes(client, names, repository=settings.repository,
                                 registry=settings.registry, extra_tags=tags,
                                 allow_missing=runner.dry_run)
    results = []
    for spec in specs:
        with output.stage(f"push {spec.target}"):
            result = push_mod.execute_push(client, runner, spec, retries=retries)
        if result is not None:
            results.append(result)
    if not runner.dry_run:
        output.emit([r.row() for r in results], PUSH_COLUMNS, as_json=as_json)
    return results


def _optional_client() -> docker.DockerClient | None:
    """In dry-run the engine is consulted when it answers (to say what is already there)."""
    try:
        return engine.connect(timeout=5)
    except Exception:
        return None


DISK_COLUMNS = ("path", "free_gib", "need_gib", "freed_gib", "free_after_gib", "removed", "status")


def disk(
    settings: Settings,
    runner: Runner,
    *,
    variants: Sequence[str] = (),
    need: str | None = None,
    path: str | None = None,
    free: bool = False,
    remove: Sequence[str] = (),
    as_json: bool = False,
) -> diskspace.DiskPlan:
    """Check (and with `free`, make) room on the Docker data root; see clusterprobe.diskspace."""
    names: list[str] = []
    if variants:
        names = [v.name for v in load_variants(settings.variants_file, region=settings.region).select(variants)]
    need_bytes = diskspace.parse_size(need) if need else diskspace.variants_need(names)
    root = diskspace.check_path(path) if path else diskspace.docker_root(engine.connect(timeout=30).info())
    candidates = diskspace.removables(remove, data_root=root)
    if free:
        plan = diskspace.plan_free(root, need_bytes, candidates, lambda p: diskspace.du_size(runner, p))
        free_after = diskspace.execute_free(runner, plan, default_list=not remove)
    else:
        plan = diskspace.DiskPlan(path=root, free=diskspace.free_bytes(root), need=need_bytes)
        free_after = plan.free
    if runner.dry_run:
        output.progress(f"{root}: {output.human_bytes(plan.free)} free, {output.human_bytes(need_bytes)} "
                        f"needed; about {output.human_bytes(free_after)} after the commands above")
    else:
        output.emit([diskspace.report_row(plan, free_after, as_json=as_json)], DISK_COLUMNS, as_json=as_json)
    diskspace.require_room(plan, free_after)
    return plan


def squash(
    settings: Settings,
    runner: Runner,
    *,
    variants: Sequence[str] = (),
    backend: str = "auto",
    compression: str | None = None,
    force: bool = False,
    wait: float = 0,
    as_json: bool = False,
) -> list[squash_mod.SquashResult]:
    """Built variant images -> <squash_dir>/<repository>-<variant>.sqsh + manifest; see clusterprobe.squash."""
    config = load_variants(settings.variants_file, region=settings.region)
    names = [v.name for v in config.select(variants)]
    chosen = choose_compression(compression, os.environ)
    client = engine.connect() if not runner.dry_run else _optional_client()
    specs = squash_mod.plan_squashes(client, names, explicit=bool(variants), repository=settings.repository,
                                     out_dir=settings.squash_dir, backend=backend, compression=chosen,
                                     environ=os.environ, allow_missing=runner.dry_run)
    results = squash_mod.execute_squashes(client, runner, specs, force=force, wait=wait)
    if not runner.dry_run:
        output.emit([r.row() for r in results], SQUASH_COLUMNS, as_json=as_json)
    return results


STAGE_COLUMNS = ("variant", "job", "job_id", "script")
WAIT_COLUMNS = ("variant", "job", "job_id", "state", "exit_code", "verdict", "results")


def stage_jobs(
    settings: Settings,
    runner: Runner,
    *,
    variants: Sequence[str] = (),
    submit: bool = False,
    wait: bool = False,
    wait_timeout: float = 3600,
    as_json: bool = False,
    **flags: Any,
) -> list[dict[str, Any]]:
    """sbatch files per variant in settings.jobs_dir (+ sbatch with `submit`); see clusterprobe.stage.

    `flags` are stage.validate_options' keywords (a misspelt one is a TypeError, not ignored).
    """
    config = load_variants(settings.variants_file, region=settings.region)
    options = stage_mod.validate_options(out=settings.jobs_dir, squash_dir=settings.squash_dir,
                                         repository=settings.repository, **flags)
    selected = config.select(variants)
    stages = stage_mod.plan_stage(selected, options, stage_mod.read_manifests(selected, options))
    if wait and not submit:
        raise ConfigError("--wait needs --submit", fix="add --submit, or drop --wait")
    rows = stage_mod.execute_stage(runner, stages, submit=submit)
    if runner.dry_run:
        return rows
    if not wait:
        output.emit(rows, STAGE_COLUMNS, as_json=as_json)
        return rows
    rows = _wait_for_verdicts(runner, rows, wait_timeout)
    output.emit(rows, WAIT_COLUMNS, as_json=as_json)
    failed = [r for r in rows if r["verdict"] != "PASS"]
    if failed:
        raise JobFailedError(
            f"{len(failed)} of {len(rows)} jobs did not pass: "
            + ", ".join(f"{r['variant']}/{r['job']} (job {r['job_id']}: {r['state']})" for r in failed),
            fix="read their logs: " + " ".join(str(r["log"]) for r in failed),
        )
    return rows


def _wait_for_verdicts(runner: Runner, rows: list[dict[str, Any]], timeout: float) -> list[dict[str, Any]]:
    """Wait for the submitted jobs; add state, exit code, verdict and paths from each job's results."""

    def results_path(row: dict[str, Any]) -> Path:
        return Path(row["script"]).parent / "logs" / f"{row['job']}-{row['job_id']}.json"

    by_id = {r["job_id"]: r for r in rows}
    states = slurm.wait_for_jobs(runner, list(by_id), timeout=timeout,
                                 finished=lambda job_id: results_path(by_id[job_id]).exists())
    out = []
    for row in rows:
        state, exit_code = states[row["job_id"]]
        path = results_path(row)
        result: dict[str, Any] = {}
        if path.exists():
            try:
                result = json.loads(path.read_text())
            except ValueError:
                result = {}
        verdict = result.get("verdict") or ("RUNNING" if state == "WAIT_TIMEOUT" else "NO RESULT")
        out.append({**row, "state": state, "exit_code": result.get("exit_code", exit_code), "verdict": verdict,
                    "results": str(path) if path.exists() else None,
                    "log": result.get("log") or str(Path(row["script"]).parent / "logs")})
    return out
