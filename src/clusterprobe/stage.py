"""`invoke stage-jobs`: validated options -> rendered sbatch files (pure) -> one folder per variant.

Every value that lands in a script is validated here first (ConfigError naming the flag), then
rendered by the Jinja2 templates in slurm/ through quoting filters; the renderer refuses any value
that did not pass through one, so nothing reaches the shell unquoted.

For the Pyxis runtime the jobs point at the exact .sqsh `invoke squash` made, read from its manifest
(`<squash_dir>/<repository>-<variant>.sqsh.json`) and refused when it is missing or disagrees with the
file. Staging is atomic: a variant's folder is rendered next to the target and swapped into place
(renameat2 RENAME_EXCHANGE; file by file where the file system lacks it), keeping logs/.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from clusterprobe import __version__, output, slurm, squash
from clusterprobe.config import Variant, did_you_mean
from clusterprobe.errors import ConfigError, PreflightError, SlurmError, StageError
from clusterprobe.output import human_bytes, parse_bytes
from clusterprobe.runner import Runner
from clusterprobe.settings import PROJECT_ROOT
from clusterprobe.stagedir import StagedFile, replace_folder

TEMPLATES_DIR = PROJECT_ROOT / "slurm"
JOBS = ("ddp_check", "comms_bench")  # also the order of submission
JOB_TITLES = {
    "ddp_check": "multi-node PyTorch DDP check (collectives, short training, identical weights)",
    "comms_bench": "collective bandwidth sweep (nccl-tests style algbw/busbw)",
}
REPORT_SUFFIXES = {"ddp_check": ".report.json", "comms_bench": ".rows.jsonl"}
RUNTIMES = ("pyxis", "host")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce")
STAGE_RECORD = "stage.json"
SCRIPT_MODE = 0o755
DATA_MODE = 0o644
IMAGE_ENTRYPOINTS = "/opt/clusterprobe"

# What may appear in a path we write into a script. Narrower than POSIX on purpose: the staged folder
# lands in #SBATCH lines (no quotes, no whitespace, no '%' which Slurm expands in file names), in
# Pyxis' --container-mounts (',' and ':' separate entries there) and in the job's JSON (no '"' or
# '\'). '#' is allowed and written '\#' in #SBATCH lines, where an unescaped one starts a comment.
PATH_CHARS = "letters, digits and . _ / @ + = ~ # -"
_PATH = re.compile(r"^/[A-Za-z0-9._/@+=~#-]*$")
_COMMAND = re.compile(r"^[A-Za-z0-9._+-]+$")
_PARTITION = re.compile(r"^[A-Za-z0-9_.-]{1,64}(,[A-Za-z0-9_.-]{1,64})*$")
_ACCOUNT = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# Slurm's --time: min, min:sec, h:min:sec, d-h, d-h:min, d-h:min:sec, or no limit.
_TIME = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d{1,2}(:\d{1,2}){0,2}|UNLIMITED|INFINITE)$")
_MOUNT_FLAGS = re.compile(r"^[a-z_]+(\+[a-z_]+)*$")
_REPOSITORY = re.compile(r"^[a-z0-9][a-z0-9._/-]{0,127}$")
_IMAGE = re.compile(r"^[A-Za-z0-9._/:@-]{1,255}$")
_IMAGE_ID = re.compile(r"^sha256:[0-9a-f]{64}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_NODES = 4096
MAX_RANKS_PER_NODE = 256
MAX_TIMEOUT_S = 7 * 24 * 3600


# ---------------------------------------------------------------------------------------------
# Options, validated once


@dataclass(frozen=True)
class Mount:
    """One Pyxis bind mount: SRC[:DST[:FLAGS]] (FLAGS joined with '+', e.g. ro or ro+rprivate)."""

    source: str
    target: str
    flags: str = ""

    def spec(self) -> str:
        return f"{self.source}:{self.target}" + (f":{self.flags}" if self.flags else "")


@dataclass(frozen=True)
class Sweep:
    """The comms_bench sizes and counts (param/nccl-tests flags -b -e -f -n -w)."""

    min_bytes: str
    max_bytes: str
    step_factor: int
    iters: int
    warmup: int
    collectives: tuple[str, ...]


@dataclass(frozen=True)
class StageOptions:
    out: Path
    squash_dir: Path
    repository: str
    runtime: str = "pyxis"
    nodes: int = 2
    gpus_per_node: int = 8
    procs_per_node: int = 2
    partition: str | None = None
    account: str | None = None
    time: str = "00:30:00"
    exclusive: bool = True
    mounts: tuple[Mount, ...] = ()
    python: str = "python"
    entrypoints: str = IMAGE_ENTRYPOINTS
    epochs: int = 3
    timeout: int = 300
    min_bytes: str | None = None
    max_bytes: str | None = None
    iters: int | None = None
    collectives: tuple[str, ...] = ()
    min_busbw: float | None = None

    def ranks_per_node(self, variant: Variant) -> int:
        return self.gpus_per_node if variant.gpu else self.procs_per_node

    def sweep(self, variant: Variant) -> Sweep:
        """Defaults sized for the device: up to 1 GiB on GPUs, a quick look on CPUs."""
        if variant.gpu:
            base = Sweep("8", "1G", 2, 20, 5, ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"))
        else:
            base = Sweep("8", "1M", 4, 5, 2, ("all_reduce", "all_gather"))
        iters = self.iters if self.iters is not None else base.iters
        return Sweep(
            min_bytes=self.min_bytes or base.min_bytes,
            max_bytes=self.max_bytes or base.max_bytes,
            step_factor=base.step_factor,
            iters=iters,
            warmup=min(base.warmup, iters),
            collectives=self.collectives or base.collectives,
        )


def _fail(flag: str, value: object, problem: str, fix: str) -> ConfigError:
    return ConfigError(f"{flag} {value!r} is not valid: {problem}", fix=fix)


def check_path(flag: str, value: str | Path) -> str:
    text = str(value)
    if not text.startswith("/"):
        raise _fail(flag, text, "it must be an absolute path", f"write it from the root, e.g. /apps/{text}")
    if not _PATH.match(text):
        raise _fail(flag, text, f"a path written into job scripts may contain only {PATH_CHARS}",
                    "use a path without spaces, quotes, '%', ',' or ':' (a symlink to it works)")
    if any(part == ".." for part in text.split("/")):
        raise _fail(flag, text, "'..' is not allowed", "give the resolved path")
    return text


def _absolute(path: str | Path) -> str:
    """`path` from the current directory, '~' expanded, '..' folded; symlinks are kept as given."""
    return os.path.normpath(Path(path).expanduser().absolute())


def parse_mount(text: str) -> Mount:
    """`SRC`, `SRC:DST` or `SRC:DST:FLAGS` (Pyxis' --container-mounts entry), both paths absolute."""
    parts = text.split(":")
    if len(parts) > 3 or not parts[0]:
        raise _fail("--mount", text, "expected SRC, SRC:DST or SRC:DST:FLAGS",
                    "for example --mount /fsx:/fsx or --mount /data:/data:ro")
    source = check_path("--mount", parts[0])
    target = check_path("--mount", parts[1]) if len(parts) > 1 and parts[1] else source
    flags = parts[2] if len(parts) > 2 else ""
    if flags and not _MOUNT_FLAGS.match(flags):
        raise _fail("--mount", text, "mount flags are words joined by '+'", "for example ro or ro+rprivate")
    return Mount(source, target, flags)


def parse_size(flag: str, text: str) -> int:
    size = parse_bytes(text)
    if size is None:
        raise _fail(flag, text, "not a size", "write bytes with an optional K, M, G (binary): 8, 64K, 1M, 2G")
    return size


def _bandwidth(value: float | str | None) -> float | None:
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = -1.0
    if isinstance(value, bool) or not 0 <= number < float("inf"):
        raise _fail("--min-busbw", value, "expected a bandwidth in GB/s, 0 or more", "e.g. --min-busbw 40")
    return number


def _int_in(flag: str, value: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _fail(flag, value, f"expected a whole number from {low} to {high}", f"pass {flag} {low}..{high}")
    return value


def validate_options(
    *,
    out: str | Path,
    squash_dir: str | Path,
    repository: str,
    runtime: str = "pyxis",
    nodes: int = 2,
    gpus_per_node: int = 8,
    procs_per_node: int = 2,
    partition: str | None = None,
    account: str | None = None,
    time: str | None = None,
    exclusive: bool = True,
    mounts: Sequence[str] = (),
    python: str | None = None,
    entrypoints: str | None = None,
    epochs: int = 3,
    timeout: int = 300,
    min_bytes: str | None = None,
    max_bytes: str | None = None,
    iters: int | None = None,
    collectives: Sequence[str] = (),
    min_busbw: float | str | None = None,
) -> StageOptions:
    """Every command-line value checked, with a ConfigError that names the flag and the fix.

    Relative --out/--squash-dir are taken from the current directory. The host runtime's default
    Python is the one running this (a venv with torch on a shared file system, typically).
    """
    if runtime not in RUNTIMES:
        raise _fail("--runtime", runtime, did_you_mean(runtime, RUNTIMES), f"use one of: {', '.join(RUNTIMES)}")
    out_path = Path(check_path("--out", _absolute(out)))
    squash_path = Path(_absolute(squash_dir))
    if partition and not _PARTITION.match(partition):
        raise _fail("--partition", partition, "a partition name is letters, digits, '_', '.' and '-' "
                    "(several joined by ',')", "check the name with `sinfo -s`")
    if account and not _ACCOUNT.match(account):
        raise _fail("--account", account, "an account name is letters, digits, '_', '.' and '-'",
                    "check the name with `sacctmgr show assoc user=$USER`")
    time = time or StageOptions.time
    if not _TIME.match(time):
        raise _fail("--time", time, "not a Slurm time limit",
                    "use minutes, HH:MM:SS or D-HH:MM:SS, e.g. --time 00:30:00")
    parsed_mounts = tuple(parse_mount(m) for m in mounts)
    if parsed_mounts and runtime != "pyxis":
        raise ConfigError("--mount is for --runtime pyxis (bind mounts into the container)",
                          fix="drop --mount: with --runtime host the job sees the node's file systems")
    if runtime == "pyxis":
        python = python or "python"
        entrypoints = entrypoints or IMAGE_ENTRYPOINTS
    else:
        python = python or sys.executable
        entrypoints = entrypoints or str(PROJECT_ROOT / "entrypoints")
    if not (_COMMAND.match(python) or _PATH.match(python)):
        raise _fail("--python", python, f"expected a command name or an absolute path of {PATH_CHARS}",
                    "for example --python /fsx/envs/torch/bin/python")
    check_path("--entrypoints", entrypoints)
    for name in collectives:
        if name not in COLLECTIVES:
            raise _fail("--collective", name, did_you_mean(name, COLLECTIVES),
                        f"use one of: {', '.join(COLLECTIVES)}")
    low = parse_size("--min-bytes", min_bytes) if min_bytes else None
    high = parse_size("--max-bytes", max_bytes) if max_bytes else None
    if low is not None and high is not None and low > high:
        raise ConfigError(f"--min-bytes {min_bytes} is larger than --max-bytes {max_bytes}",
                          fix="swap them, or raise --max-bytes")
    busbw = _bandwidth(min_busbw)
    if not _REPOSITORY.match(repository):
        raise _fail("--repository", repository, "not an image repository name", "e.g. clusterprobe")
    return StageOptions(
        out=out_path,
        squash_dir=squash_path,
        repository=repository,
        runtime=runtime,
        nodes=_int_in("--nodes", nodes, 1, MAX_NODES),
        gpus_per_node=_int_in("--gpus-per-node", gpus_per_node, 1, MAX_RANKS_PER_NODE),
        procs_per_node=_int_in("--procs-per-node", procs_per_node, 1, MAX_RANKS_PER_NODE),
        partition=partition or None,
        account=account or None,
        time=time,
        exclusive=exclusive,
        mounts=parsed_mounts,
        python=python,
        entrypoints=entrypoints.rstrip("/") or "/",
        epochs=_int_in("--epochs", epochs, 1, 10_000),
        timeout=_int_in("--timeout", timeout, 10, MAX_TIMEOUT_S),
        min_bytes=min_bytes or None,
        max_bytes=max_bytes or None,
        iters=None if iters is None else _int_in("--iters", iters, 1, 100_000),
        collectives=tuple(dict.fromkeys(collectives)),
        min_busbw=busbw,
    )


# ---------------------------------------------------------------------------------------------
# The squash step's manifest


@dataclass(frozen=True)
class SquashManifest:
    """What `invoke squash` wrote beside the .sqsh (docs/ARCHITECTURE.md)."""

    path: Path
    variant: str
    image: str
    image_id: str
    sqsh: Path
    backend: str
    compression: str
    size_bytes: int
    created: str


def read_squash_manifest(squash_dir: Path, repository: str, variant: str) -> SquashManifest:
    """The manifest of a variant's .sqsh, checked against the file; PreflightError otherwise."""
    paths = squash.squash_paths(squash_dir, repository, variant)  # the names `invoke squash` writes
    sqsh, manifest_path = paths.sqsh, paths.manifest
    fix = f"run `invoke squash --variant {variant} --out {squash_dir}` (or pass --squash-dir)"
    if not manifest_path.is_file():
        what = "its .sqsh exists but has no manifest" if sqsh.exists() else "nothing is there"
        raise PreflightError(f"variant '{variant}' has not been squashed: no {manifest_path} ({what})", fix=fix)
    if not sqsh.is_file():
        raise PreflightError(f"{manifest_path} names {sqsh}, which does not exist", fix=fix)
    try:
        raw = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as exc:
        raise PreflightError(f"{manifest_path} is not readable JSON: {exc}", fix=fix) from None
    if not isinstance(raw, dict):
        raise PreflightError(f"{manifest_path} is not a JSON object", fix=fix)
    missing = [k for k in ("variant", "image", "image_id", "sqsh", "size_bytes") if k not in raw]
    if missing:
        raise PreflightError(f"{manifest_path} lacks {', '.join(missing)}", fix=fix)

    def text(key: str) -> str:
        value = raw.get(key, "")
        if not isinstance(value, str) or _CONTROL.search(value):
            raise PreflightError(f"{manifest_path}: '{key}' is not a one-line string: {value!r}", fix=fix)
        return value

    manifest = SquashManifest(
        path=manifest_path, variant=text("variant"), image=text("image"), image_id=text("image_id"),
        sqsh=Path(text("sqsh")), backend=text("backend"), compression=text("compression"),
        size_bytes=raw["size_bytes"] if isinstance(raw["size_bytes"], int) else -1, created=text("created"),
    )
    disagree = []
    if manifest.variant != variant:
        disagree.append(f"it is for variant '{manifest.variant}'")
    if manifest.sqsh != sqsh:
        disagree.append(f"it names {manifest.sqsh}, not {sqsh}")
    actual = sqsh.stat().st_size
    if manifest.size_bytes != actual:
        disagree.append(f"it records {manifest.size_bytes} bytes but the file has {actual} "
                        "(replaced or cut short since it was squashed)")
    if not _IMAGE.match(manifest.image):
        disagree.append(f"its image {manifest.image!r} is not an image reference")
    if not _IMAGE_ID.match(manifest.image_id):
        disagree.append(f"its image_id {manifest.image_id!r} is not sha256:<64 hex>")
    if disagree:
        raise PreflightError(f"{manifest_path} and {sqsh} disagree: {'; '.join(disagree)}", fix=fix)
    check_path("the .sqsh path", sqsh)
    return manifest


# ---------------------------------------------------------------------------------------------
# Rendering (pure)


class Quoted(str):
    """Text that went through a quoting filter; the only thing the templates may output."""


def sh(value: object) -> Quoted:
    """One shell word: shlex.quote, which leaves plain words bare and single-quotes the rest."""
    if value is None or isinstance(value, (list, tuple, dict)):
        raise StageError(f"internal: {value!r} cannot be written as one shell word")
    return Quoted(shlex.quote(str(value)))


def sbatch_value(value: object) -> Quoted:
    """An #SBATCH option: checked to need no quoting (sbatch parses these lines itself), '#' escaped."""
    text = str(value)
    if not re.fullmatch(r"--[a-z-]+(=[A-Za-z0-9._/@+=~#%:,-]+)?", text):
        raise StageError(f"internal: {text!r} cannot be written in an #SBATCH line")
    return Quoted(text.replace("#", "\\#"))


def comment(value: object) -> Quoted:
    """Text for a comment line: refused if it could end the line."""
    text = str(value)
    if _CONTROL.search(text):
        raise StageError(f"internal: {text!r} cannot be written in a comment")
    return Quoted(text)


def _only_quoted(value: object) -> object:
    if not isinstance(value, Quoted):
        raise StageError(f"internal: template printed {value!r} without a quoting filter (sh, sbatch, comment)")
    return value


@cache
def template_env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_only_quoted,
    )
    env.filters.update(sh=sh, sbatch=sbatch_value, comment=comment)
    return env


def sbatch_options(job: str, variant: Variant, options: StageOptions, staged_dir: str) -> list[str]:
    """The #SBATCH lines, always in this order (golden files depend on it)."""
    lines = [f"--job-name=clusterprobe-{job}-{variant.name}"]
    if options.partition:
        lines.append(f"--partition={options.partition}")
    if options.account:
        lines.append(f"--account={options.account}")
    lines += [f"--nodes={options.nodes}", "--ntasks-per-node=1"]
    if variant.gpu:
        lines.append(f"--gpus-per-node={options.gpus_per_node}")
    if options.exclusive:
        lines.append("--exclusive")
    lines += [f"--time={options.time}", f"--output={staged_dir}/logs/{job}-%j.out"]
    return lines


def job_env(variant: Variant) -> list[tuple[str, str]]:
    """What the job exports: the variant's job_env, and for CPU variants no GPU from the runtime."""
    env = dict(variant.job_env)
    if not variant.gpu:
        env.setdefault("NVIDIA_VISIBLE_DEVICES", "void")  # enroot's nvidia hook then adds no GPU
    return sorted(env.items())


def pyxis_options(variant: Variant, options: StageOptions, manifest: SquashManifest,
                  staged_dir: str) -> list[str]:
    mounts = [Mount(staged_dir, staged_dir).spec()] + [m.spec() for m in options.mounts]
    argv = [f"--container-image={manifest.sqsh}", f"--container-mounts={','.join(dict.fromkeys(mounts))}"]
    names = [name for name, _ in job_env(variant)]
    if names:
        argv.append(f"--container-env={','.join(names)}")
    # No home directory: its ~/.local site-packages would shadow the image's Python packages.
    argv += [f"--container-workdir={staged_dir}", "--no-container-mount-home"]
    return argv


def render_job(job: str, variant: Variant, options: StageOptions, manifest: SquashManifest | None) -> str:
    """The sbatch script of `job` for `variant`, as it will be staged (pure: no file is read)."""
    if job not in JOBS:
        raise StageError(f"unknown job '{job}': {did_you_mean(job, JOBS)}")
    staged_dir = str(options.out / variant.name)
    fields: dict[str, Any] = {"job": job, "variant": variant.name, "runtime": options.runtime,
                              "staged_dir": staged_dir, "clusterprobe": __version__}
    if options.runtime == "pyxis":
        if manifest is None:
            raise StageError("internal: the pyxis runtime needs the squash manifest")
        provenance = [
            f"image:       {manifest.image}",
            f"image ID:    {manifest.image_id}",
            f"squashfs:    {manifest.sqsh} ({human_bytes(manifest.size_bytes)}, {manifest.compression or '?'}"
            f" via {manifest.backend or '?'}, created {manifest.created or '?'})",
        ]
        fields.update(image=manifest.image, image_id=manifest.image_id, sqsh=str(manifest.sqsh))
        summary = f"variant={variant.name} image={manifest.image} image_id={manifest.image_id}"
        srun = pyxis_options(variant, options, manifest, staged_dir)
    else:
        provenance = [f"python:      {options.python} (the node's own: runtime host)",
                      f"entrypoints: {options.entrypoints}"]
        fields.update(python=options.python, entrypoints=options.entrypoints)
        summary = f"variant={variant.name} runtime=host python={options.python}"
        srun = []
    sweep = options.sweep(variant)
    context = {
        "job": job,
        "title": JOB_TITLES[job],
        "variant": variant.name,
        "runtime": options.runtime,
        "provenance": provenance,
        "sbatch_options": sbatch_options(job, variant, options, staged_dir),
        "staged_dir": staged_dir,
        "report_suffix": REPORT_SUFFIXES[job],
        "summary": summary,
        "env": job_env(variant),
        "srun_options": srun,
        "python": options.python,
        "nproc": options.ranks_per_node(variant),
        "timeout": options.timeout,
        "entrypoint": f"{options.entrypoints}/{job}.py",
        "staged_fields": ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in fields.items()),
        "backend": "nccl" if variant.gpu else "gloo",
        "device": "cuda" if variant.gpu else "cpu",
        "epochs": options.epochs,
        "min_bytes": sweep.min_bytes,
        "max_bytes": sweep.max_bytes,
        "step_factor": sweep.step_factor,
        "iters": sweep.iters,
        "warmup": sweep.warmup,
        "collectives": ",".join(sweep.collectives),
        "min_busbw": None if options.min_busbw is None else f"{options.min_busbw:g}",
    }
    try:
        return template_env().get_template(f"{job}.sbatch.j2").render(context)
    except jinja2.TemplateError as exc:
        raise StageError(f"rendering slurm/{job}.sbatch.j2 failed: {exc}",
                         fix="the template and clusterprobe.stage disagree; check both") from exc


@dataclass(frozen=True)
class VariantStage:
    """One variant's staged folder, fully rendered before anything is written."""

    variant: Variant
    folder: Path
    files: tuple[StagedFile, ...]
    manifest: SquashManifest | None = None
    scripts: Mapping[str, str] = field(default_factory=dict)  # job -> file name

    def script_path(self, job: str) -> Path:
        return self.folder / self.scripts[job]


def plan_stage(variants: Sequence[Variant], options: StageOptions,
               manifests: Mapping[str, SquashManifest | None]) -> list[VariantStage]:
    """Render every job of every variant (pure: the manifests were read beforehand)."""
    plans = []
    for variant in variants:
        manifest = manifests.get(variant.name)
        scripts = {job: f"{job}.sbatch" for job in JOBS}
        files = [StagedFile(scripts[job], render_job(job, variant, options, manifest), SCRIPT_MODE)
                 for job in JOBS]
        record = {
            "clusterprobe": __version__,
            "variant": variant.name,
            "runtime": options.runtime,
            "jobs": scripts,
            "image": manifest.image if manifest else None,
            "image_id": manifest.image_id if manifest else None,
            "sqsh": str(manifest.sqsh) if manifest else None,
            "python": options.python,
            "entrypoints": options.entrypoints,
            "nodes": options.nodes,
            "ranks_per_node": options.ranks_per_node(variant),
            "files": sorted([*scripts.values(), STAGE_RECORD]),
        }
        files.append(StagedFile(STAGE_RECORD, json.dumps(record, indent=2, sort_keys=True) + "\n", DATA_MODE))
        plans.append(VariantStage(variant=variant, folder=options.out / variant.name, files=tuple(files),
                                  manifest=manifest, scripts=scripts))
    return plans


def write_stage(stage: VariantStage, *, exchange: bool = True) -> list[str]:
    """Write a variant's folder atomically (see clusterprobe.stagedir); returns files kept aside."""
    return replace_folder(stage.folder, stage.files, record=STAGE_RECORD, exchange=exchange)


def read_manifests(variants: Sequence[Variant], options: StageOptions) -> dict[str, SquashManifest | None]:
    """The squash manifest of each variant for the Pyxis runtime (all checked before anything is written)."""
    if options.runtime != "pyxis":
        return {v.name: None for v in variants}
    return {v.name: read_squash_manifest(options.squash_dir, options.repository, v.name) for v in variants}


def execute_stage(runner: Runner, stages: Sequence[VariantStage], *, submit: bool) -> list[dict[str, Any]]:
    """Write each folder (or, in a dry run, print what would be written), then sbatch with `submit`.

    Returns one row per job: variant, job, job_id (None unless submitted), script.
    """
    for staged in stages:
        if runner.dry_run:
            for f in staged.files:
                runner.echo(f"# write {staged.folder / f.name} (mode {f.mode:04o}, {len(f.text.encode())} bytes)")
            runner.echo(f"# mkdir -p {staged.folder / 'logs'}")
            continue
        with output.stage(f"stage {staged.variant.name} jobs in {staged.folder}"):
            kept = write_stage(staged)
        for path in kept:
            output.progress(f"kept aside, its name is taken in the new folder: {path}")
    rows: list[dict[str, Any]] = []
    for staged in stages:
        for job in JOBS:
            script = staged.script_path(job)
            try:
                job_id = slurm.submit(runner, script) if submit else None
            except SlurmError as exc:
                done = [f"{r['variant']}/{r['job']}={r['job_id']}" for r in rows if r["job_id"]]
                if done:
                    exc.message += f" (submitted before it: {', '.join(done)})"
                raise
            rows.append({"variant": staged.variant.name, "job": job, "job_id": job_id, "script": str(script)})
    return rows
