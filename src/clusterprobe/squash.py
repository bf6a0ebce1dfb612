"""`invoke squash`: built variant images -> `<dir>/<repository>-<variant>.sqsh` for Enroot and Pyxis.

Plan (which image, which file, which backend and compression; read-only), preflight (free space,
writable folder, references enroot takes) for every pending squash before any work, then per
variant, under a lock on the output:

- backend `enroot`: `enroot import -o <dir>/.<name>.sqsh.tmp-XXXX dockerd://<image id>`;
- backend `native` (no enroot: CI runners, laptops): `docker create`, then the export stream goes
  straight into `mksquashfs - TMP -tar -all-root ...`, preceded by the rootfs files enroot would
  write (clusterprobe.rootfs). mksquashfs keeps the first of two tar entries with the same name,
  so ours win over the image's, and a later directory entry still sets the directory's metadata.
  Nothing is unpacked: no temporary space beyond the output.

The result is written to a hidden temporary name in the output folder, fsynced, made 0644 and
renamed over the old file (jobs reading the old file keep their open copy); the manifest beside
it follows the same way. A run killed at any point leaves the old file and manifest intact; the
next run removes what the killed one left (temporary files, the export container) once it holds
the lock. An output whose manifest names the same image, variant and mksquashfs options is
up to date and skipped.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import re
import secrets
import shutil
import signal
import subprocess  # noqa: TID251 - the export stream goes into mksquashfs's stdin; the pipeline is echoed via Runner
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import docker
import docker.errors
import filelock
import requests

from clusterprobe import __version__, engine, output, rootfs
from clusterprobe.build import versioned_tag
from clusterprobe.compression import ChosenCompression
from clusterprobe.config import did_you_mean
from clusterprobe.errors import CommandError, ConfigError, LockedError, PreflightError, SquashError
from clusterprobe.files import publish, write_atomic
from clusterprobe.imageref import ImageRef
from clusterprobe.runner import Runner, display_command, require_tool, tail

BACKENDS = ("auto", "enroot", "native")
SPACE_FACTOR = 1.1  # free space wanted per byte of image: squashfs metadata on incompressible data
CONTAINER_LABEL = "io.clusterprobe.squash-output"  # value: the .sqsh path the container is exported for
EXPORT_EXCLUDES = ("dev/*", ".dockerenv")  # what enroot's `tar -x` leaves out of a `docker export`
EXPORT_CHUNK = 1 << 20
PIPE_BYTES = 1 << 20  # Linux's default pipe-max-size
PROGRESS_EVERY_S = 5.0
SQUASHFS_MAGIC = b"hsqs"
# `enroot import dockerd://` takes [[:alnum:]/._:-]+ after the scheme: no digests (`@sha256:`).
ENROOT_DOCKERD_REF = re.compile(r"^[A-Za-z0-9/._:-]+$")


@dataclass(frozen=True)
class SquashPaths:
    """Where one variant's squash lives; every name stage-jobs needs comes from here."""

    out_dir: Path
    name: str  # <repository>-<variant>, '/' written '+' as enroot does

    @property
    def sqsh(self) -> Path:
        return self.out_dir / f"{self.name}.sqsh"

    @property
    def manifest(self) -> Path:
        return self.out_dir / f"{self.name}.sqsh.json"

    @property
    def lock(self) -> Path:
        return self.out_dir / f".{self.name}.sqsh.lock"

    def temp(self, final: Path) -> Path:
        """A fresh hidden name beside `final` (enroot refuses to overwrite, so it must not exist)."""
        return final.with_name(f".{final.name}.tmp-{secrets.token_hex(4)}")

    def stale_temps(self) -> list[Path]:
        return sorted(p for final in (self.sqsh, self.manifest)
                      for p in self.out_dir.glob(f".{final.name}.tmp-*"))


def squash_paths(out_dir: str | os.PathLike[str], repository: str, variant: str) -> SquashPaths:
    return SquashPaths(Path(os.path.abspath(out_dir)), f"{repository}-{variant}".replace("/", "+"))


@dataclass(frozen=True)
class SourceImage:
    """The built image of a variant: its alias, its versioned tag, ID, size and config."""

    alias: str
    tag: str
    image_id: str
    size_bytes: int
    config: rootfs.ImageConfig


def find_source_image(client: docker.DockerClient | None, repository: str, variant: str) -> SourceImage | None:
    alias = f"{repository}:{variant}"
    image = engine.get_image(client, alias) if client is not None else None
    if image is None:
        return None
    tag = versioned_tag(image.tags, repository, variant) or alias
    return SourceImage(alias=alias, tag=tag, image_id=str(image.id),
                       size_bytes=engine.image_size(image),
                       config=rootfs.ImageConfig.from_inspect(image.attrs))


@dataclass(frozen=True)
class SquashSpec:
    """One squash, decided before any work."""

    variant: str
    source: SourceImage | None  # None only in a dry run before the image is built
    paths: SquashPaths
    backend: str  # "enroot" or "native"
    backend_reason: str
    compression: ChosenCompression
    enroot_temp: Path  # where enroot unpacks the image (ENROOT_TEMP_PATH, TMPDIR or /tmp)

    @property
    def image_id(self) -> str:
        return self.source.image_id if self.source else "<image id after invoke build>"

    @property
    def container_name(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]", "_", f"clusterprobe-squash-{self.paths.name}-{os.getpid()}")

    def enroot_command(self, temp: Path) -> list[str]:
        return ["enroot", "import", "-o", str(temp), f"dockerd://{self.image_id}"]

    def enroot_env(self) -> dict[str, str]:
        """ENROOT_SQUASH_OPTIONS for enroot, unless the user's environment sets it (then inherited)."""
        if self.compression.from_environment:
            return {}
        return {"ENROOT_SQUASH_OPTIONS": " ".join(self.compression.options)}  # enroot word-splits it

    def mksquashfs_command(self, temp: Path, processors: int) -> list[str]:
        """mksquashfs reading the export tar on stdin, with the options enroot's import uses."""
        return ["mksquashfs", "-", str(temp), "-tar", "-all-root", "-root-mode", "0755", "-noappend",
                "-no-xattrs", "-no-progress", "-processors", str(processors), *self.compression.options,
                "-wildcards", "-e", *EXPORT_EXCLUDES]


@dataclass
class SquashResult:
    variant: str
    manifest: dict[str, Any]
    manifest_path: Path
    status: str  # "built" or "up-to-date"
    seconds: float

    def row(self) -> dict[str, Any]:
        return {**self.manifest, "manifest": str(self.manifest_path), "status": self.status,
                "seconds": round(self.seconds, 1), "size": output.human_bytes(self.manifest["size_bytes"])}


def select_backend(requested: str, enroot_path: str | None) -> tuple[str, str]:
    """(backend, why): `auto` is enroot where it is installed, the native backend elsewhere."""
    if requested not in BACKENDS:
        raise ConfigError(f"backend '{requested}' is unknown: {did_you_mean(requested, BACKENDS)}",
                          fix=f"use one of: {', '.join(BACKENDS)}")
    if requested != "auto":
        return requested, f"--backend {requested}"
    if enroot_path:
        return "enroot", f"enroot found at {enroot_path}"
    return "native", "enroot is not installed"


def check_enroot_reference(ref: str) -> None:
    """PreflightError for a reference `enroot import dockerd://` rejects (digests, odd characters)."""
    if "@" in ref:
        raise PreflightError(f"enroot cannot import the digest reference '{ref}'",
                             fix="refer to the image by tag or by image ID")
    if not ENROOT_DOCKERD_REF.match(ref):
        raise PreflightError(f"enroot cannot import '{ref}': dockerd:// takes letters, digits and '/._:-' only")


def plan_squashes(
    client: docker.DockerClient | None,
    variants: Sequence[str],
    *,
    explicit: bool,
    repository: str,
    out_dir: Path,
    backend: str,
    compression: ChosenCompression,
    environ: Mapping[str, str],
    allow_missing: bool = False,
) -> list[SquashSpec]:
    """One spec per variant. `explicit`: the variants were named (each must be built); otherwise
    the variants given are all known ones and those without a built image are left out."""
    chosen_backend, reason = select_backend(backend, shutil.which("enroot"))
    enroot_temp = Path(environ.get("ENROOT_TEMP_PATH") or environ.get("TMPDIR") or "/tmp")
    specs = []
    for variant in variants:
        ImageRef.parse(f"{repository}:{variant}")  # a valid repository name
        source = find_source_image(client, repository, variant)
        if source is None and not explicit:
            continue
        if source is None and not allow_missing:
            raise PreflightError(f"variant '{variant}' has no built image ({repository}:{variant} does not exist)",
                                 fix=f"build it first: invoke build --variant {variant}")
        spec = SquashSpec(variant, source, squash_paths(out_dir, repository, variant), chosen_backend, reason,
                          compression, enroot_temp)
        if chosen_backend == "enroot" and source is not None:
            check_enroot_reference(spec.image_id)  # what enroot will be handed
        specs.append(spec)
    if not specs:
        raise PreflightError(f"no variant has a built image in repository '{repository}' "
                             f"(looked for {', '.join(f'{repository}:{v}' for v in variants)})",
                             fix="build one first: invoke build --variant NAME")
    return specs


def read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def up_to_date(spec: SquashSpec) -> dict[str, Any] | None:
    """The manifest when the output already holds this image, variant and compression."""
    manifest = read_manifest(spec.paths.manifest)
    if manifest is None or spec.source is None:
        return None
    try:
        size = spec.paths.sqsh.stat().st_size
    except OSError:
        return None
    same = (manifest.get("variant") == spec.variant and manifest.get("image_id") == spec.source.image_id
            and manifest.get("mksquashfs_options") == list(spec.compression.options)
            and manifest.get("sqsh") == str(spec.paths.sqsh) and manifest.get("size_bytes") == size)
    return manifest if same else None


def _existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def preflight(specs: Sequence[SquashSpec]) -> None:
    """Before any work: the output folders are writable and every file system has room.

    Squashes that share a file system add up (the new files exist beside the old ones until each
    rename); enroot's unpacked copy of the image counts against its temporary folder.
    """
    needs: dict[int, list[tuple[Path, str, int]]] = {}  # st_dev -> (folder, what, bytes wanted)
    enroot_temps: set[int] = set()
    for spec in specs:
        if spec.source is None:
            continue
        where = _existing_ancestor(spec.paths.out_dir)
        if not where.is_dir():
            raise PreflightError(f"cannot write squash files to {spec.paths.out_dir}: {where} is not a folder",
                                 fix="pass --out with a folder")
        if not os.access(where, os.W_OK | os.X_OK):
            raise PreflightError(f"cannot write squash files to {spec.paths.out_dir}: {where} is not writable",
                                 fix="pass --out with a folder you may write to, or ask for write access")
        wanted = int(spec.source.size_bytes * SPACE_FACTOR)
        places = [(where, f"{spec.variant}: {spec.paths.sqsh.name} in {spec.paths.out_dir}", wanted)]
        if spec.backend == "enroot":
            temp = _existing_ancestor(spec.enroot_temp)
            places.append((temp, f"{spec.variant}: enroot's unpacked image in {spec.enroot_temp}", wanted))
            enroot_temps.add(temp.stat().st_dev)
        for place in places:
            needs.setdefault(place[0].stat().st_dev, []).append(place)
    for device, places in needs.items():
        free = shutil.disk_usage(places[0][0]).free
        total = sum(wanted for _, _, wanted in places)
        if total > free:
            detail = "; ".join(f"{what}: {output.human_bytes(wanted)}" for _, what, wanted in places)
            fix = "free space there, or pass --out DIR on a file system with more room"
            if device in enroot_temps:
                fix += ", or set ENROOT_TEMP_PATH to a folder with room for the unpacked image"
            raise PreflightError(
                f"not enough free space on the file system of {places[0][0]}: {output.human_bytes(total)} "
                f"needed ({detail}; image size x {SPACE_FACTOR}), {output.human_bytes(free)} free",
                fix=fix,
            )


def make_output_dir(out_dir: Path) -> None:
    """Create the output folder (and missing parents) 0755, whatever the umask."""
    missing = []
    path = out_dir
    while not path.exists():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir()
            folder.chmod(0o755)


def write_manifest(paths: SquashPaths, manifest: Mapping[str, Any]) -> None:
    write_atomic(paths.manifest, json.dumps(manifest, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def output_lock(paths: SquashPaths, wait: float) -> Iterator[None]:
    """Hold `<dir>/.<name>.sqsh.lock`; LockedError at once (wait=0) or after `wait` seconds."""
    lock = filelock.FileLock(str(paths.lock), mode=0o644)
    try:
        lock.acquire(timeout=wait)
    except filelock.Timeout:
        waited = f" after waiting {wait:g} s" if wait > 0 else ""
        raise LockedError(f"another squash of {paths.sqsh} is running (its lock {paths.lock} is held){waited}",
                          fix="let it finish, or pass --wait SECONDS to wait for it") from None
    try:
        yield
    finally:
        lock.release()


def remove_leftovers(client: docker.DockerClient | None, paths: SquashPaths) -> None:
    """What killed runs of this output left: temporary files and export containers. Holding the lock."""
    for stale in paths.stale_temps():
        output.progress(f"removing {stale} left by an interrupted squash")
        stale.unlink(missing_ok=True)
    if client is None:
        return
    try:
        leftovers = client.containers.list(all=True, filters={"label": f"{CONTAINER_LABEL}={paths.sqsh}"})
        for container in leftovers:
            output.progress(f"removing export container {container.name} left by an interrupted squash")
            container.remove(force=True)
    except docker.errors.DockerException as exc:
        output.progress(f"could not remove leftover export containers: {exc}")


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (scancel, CI cancel) raises KeyboardInterrupt, so cleanups in `finally` run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def rootfs_tar_entries(config: rootfs.ImageConfig, mtime: float) -> bytes:
    """Tar entries (no end-of-archive marker) for the files enroot writes, to go before the export."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in rootfs.rootfs_files(config).items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, int(mtime)
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
        end = tar.offset  # what close() adds after this is the end-of-archive marker
    return buffer.getvalue()[:end]


def _show_native_plan(runner: Runner, spec: SquashSpec, temp: Path, processors: int) -> None:
    """The docker create and the export pipeline, as shell commands (`docker rm` comes after)."""
    runner.show(["docker", "create", "--name", spec.container_name,
                 "--label", f"{CONTAINER_LABEL}={spec.paths.sqsh}", spec.image_id])
    runner.echo(runner.prefix + display_command(["docker", "export", spec.container_name]) + " | "
                + display_command(spec.mksquashfs_command(temp, processors))
                + f"  # {', '.join(rootfs.ROOTFS_FILES)} from the image config go first")


def squash_native(client: docker.DockerClient, runner: Runner, spec: SquashSpec, temp: Path) -> None:
    """docker create + export stream -> mksquashfs -tar on stdin; the container is always removed."""
    assert spec.source is not None
    require_tool("mksquashfs")
    processors = len(os.sched_getaffinity(0))
    argv = spec.mksquashfs_command(temp, processors)
    _show_native_plan(runner, spec, temp, processors)
    try:
        container = client.containers.create(spec.source.image_id, name=spec.container_name,
                                              labels={CONTAINER_LABEL: str(spec.paths.sqsh)})
    except docker.errors.APIError as exc:
        raise SquashError(f"docker create {spec.source.tag} failed: {exc.explanation or exc}",
                          fix="an image needs a CMD or ENTRYPOINT to be created (enroot refuses it too)"
                          if "command" in str(exc).lower() else None) from None
    try:
        prefix = rootfs_tar_entries(spec.source.config, time.time())
        with tempfile.TemporaryFile() as log:
            _stream_export(container, argv, prefix, log, spec)
    finally:
        runner.show(["docker", "rm", "--force", spec.container_name])
        with contextlib.suppress(docker.errors.DockerException):
            container.remove(force=True)


def _stream_export(container: Any, argv: list[str], prefix: bytes, log: IO[bytes], spec: SquashSpec) -> None:
    assert spec.source is not None
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT)
    assert proc.stdin is not None
    with contextlib.suppress(OSError, AttributeError):  # a deeper pipe lets export and compression overlap
        fcntl.fcntl(proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    sent, start, shown = 0, time.monotonic(), time.monotonic()
    try:
        try:
            proc.stdin.write(prefix)
            for chunk in container.export(chunk_size=EXPORT_CHUNK):
                proc.stdin.write(chunk)
                sent += len(chunk)
                if time.monotonic() - shown >= PROGRESS_EVERY_S:
                    shown = time.monotonic()
                    output.progress(f"squash {spec.variant}: {output.human_bytes(sent)} of "
                                    f"~{output.human_bytes(spec.source.size_bytes)} streamed "
                                    f"({shown - start:.0f} s)")
            proc.stdin.close()
        except BrokenPipeError:  # mksquashfs stopped reading: its exit code and log say why
            with contextlib.suppress(OSError):
                proc.stdin.close()  # drops what is still buffered, so nothing complains later
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise SquashError(f"docker export of {spec.source.tag} failed after "
                              f"{output.human_bytes(sent)}: {exc}") from None
        code = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if code != 0:
        log.seek(0)
        raise SquashError(f"mksquashfs exited with code {code} while squashing {spec.source.tag}:\n"
                          + tail(log.read().decode(errors="replace")),
                          fix="check the compression options (--compression, ENROOT_SQUASH_OPTIONS)")


def squash_enroot(runner: Runner, spec: SquashSpec, temp: Path) -> None:
    """`enroot import -o TEMP dockerd://IMAGE`; its output streams to the terminal."""
    try:
        runner.run(spec.enroot_command(temp), env=spec.enroot_env() or None)
    except CommandError as exc:
        raise SquashError(f"enroot import of {spec.variant} failed: {exc.message}",
                          fix="read enroot's messages above; --backend native squashes without enroot") from None


def _check_squashfs(path: Path, backend: str) -> int:
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
        size = path.stat().st_size
    except FileNotFoundError:
        raise SquashError(f"the {backend} backend reported success but wrote no {path}") from None
    if magic != SQUASHFS_MAGIC:
        raise SquashError(f"{path} written by the {backend} backend is not a squashfs image")
    return size


def execute_squash(
    client: docker.DockerClient | None, runner: Runner, spec: SquashSpec, *, force: bool, wait: float
) -> SquashResult | None:
    """Squash one variant (or find it up to date). None in a dry run: the commands are printed."""
    start = time.monotonic()
    label = f"{spec.variant} -> {spec.paths.sqsh}"
    if not force and (manifest := up_to_date(spec)) is not None:
        output.progress(f"{label} is up to date (image {spec.image_id[:19]}); --force redoes it")
        return SquashResult(spec.variant, manifest, spec.paths.manifest, "up-to-date", time.monotonic() - start)
    output.progress(f"squash {label}: backend {spec.backend} ({spec.backend_reason}), "
                    f"{spec.compression.describe()}")
    if runner.dry_run:
        temp = spec.paths.sqsh.with_name(f".{spec.paths.sqsh.name}.tmp-XXXXXXXX")
        if spec.backend == "enroot":
            runner.show(spec.enroot_command(temp), spec.enroot_env())
        else:
            _show_native_plan(runner, spec, temp, len(os.sched_getaffinity(0)))
            runner.show(["docker", "rm", "--force", spec.container_name])
        runner.show(["chmod", "0644", str(temp)])
        runner.show(["mv", str(temp), str(spec.paths.sqsh)])
        runner.echo(f"# then {spec.paths.manifest} (variant, image, image_id, sqsh, backend, compression, ...)")
        return None
    assert spec.source is not None and client is not None
    make_output_dir(spec.paths.out_dir)
    with output_lock(spec.paths, wait):
        if not force and (manifest := up_to_date(spec)) is not None:  # another run just made it
            return SquashResult(spec.variant, manifest, spec.paths.manifest, "up-to-date",
                                time.monotonic() - start)
        remove_leftovers(client, spec.paths)
        temp = spec.paths.temp(spec.paths.sqsh)
        try:
            with output.stage(f"squash {spec.variant} ({output.human_bytes(spec.source.size_bytes)} image)"):
                if spec.backend == "enroot":
                    squash_enroot(runner, spec, temp)
                else:
                    squash_native(client, runner, spec, temp)
            size = _check_squashfs(temp, spec.backend)
            publish(temp, spec.paths.sqsh)
        finally:
            temp.unlink(missing_ok=True)
        manifest = {
            "variant": spec.variant,
            "image": spec.source.tag,
            "image_id": spec.source.image_id,
            "sqsh": str(spec.paths.sqsh),
            "backend": spec.backend,
            "compression": spec.compression.spelling,
            "compression_source": spec.compression.source,
            "mksquashfs_options": list(spec.compression.options),
            "size_bytes": size,
            "image_size_bytes": spec.source.size_bytes,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "clusterprobe_version": __version__,
        }
        write_manifest(spec.paths, manifest)
    return SquashResult(spec.variant, manifest, spec.paths.manifest, "built", time.monotonic() - start)


def execute_squashes(
    client: docker.DockerClient | None, runner: Runner, specs: Sequence[SquashSpec], *, force: bool, wait: float
) -> list[SquashResult]:
    """Preflight every pending squash first, then squash them one after the other."""
    pending = [s for s in specs if force or up_to_date(s) is None]
    if not runner.dry_run:
        for tool in sorted({"enroot" if s.backend == "enroot" else "mksquashfs" for s in pending}):
            require_tool(tool)
    preflight(pending)
    results = []
    with sigterm_interrupts():
        for spec in specs:
            result = execute_squash(client, runner, spec, force=force, wait=wait)
            if result is not None:
                results.append(result)
    return results
