"""`invoke local-base`: a CPU PyTorch base image built with no image registry at all.

debootstrap makes a Debian rootfs (from the Debian mirror), `docker import` turns it into an
image, and a two-stage build installs torch into /opt/venv from wheels that `pip download`
fetched on the host. This is the cpu variant's default base, for laptops, CI runners and
air-gapped sites; the image is cached by its tag.
"""

from __future__ import annotations

import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import docker

from clusterprobe import engine
from clusterprobe.errors import ConfigError
from clusterprobe.runner import Runner

DEBIAN_MIRROR = "http://deb.debian.org/debian"


@dataclass(frozen=True)
class LocalBaseSpec:
    tag: str
    torch_version: str
    suite: str = "bookworm"
    mirror: str = DEBIAN_MIRROR
    python_version: str = "3.11"  # Debian bookworm's python3
    dockerfile: Path = Path(__file__).resolve().parents[2] / "images" / "local-base" / "Dockerfile"

    @property
    def rootfs_tag(self) -> str:
        repo = self.tag.rsplit(":", 1)[0]
        return f"{repo}-rootfs:{self.suite}"

    def download_command(self, dest: Path) -> list[str]:
        return [
            sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(dest),
            f"torch=={self.torch_version}", "numpy", "--only-binary=:all:",
            "--python-version", self.python_version, "--implementation", "cp",
            "--platform", "manylinux_2_28_x86_64",
        ]

    def debootstrap_command(self, rootfs: Path) -> list[str]:
        return ["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
                self.suite, str(rootfs), self.mirror]


def build_local_base(
    client: docker.DockerClient | None, runner: Runner, spec: LocalBaseSpec, *, force: bool = False
) -> str | None:
    """Build (or find) the base image; returns its ID (None in dry-run)."""
    if not spec.dockerfile.is_file():
        raise ConfigError(f"{spec.dockerfile} is missing; run from a clusterprobe checkout")
    if client is not None and not force:
        existing = engine.get_image(client, spec.tag)
        if existing is not None:
            runner.echo(f"[local-base] {spec.tag} already exists ({existing.short_id}): nothing to do")
            return str(existing.id)
    with tempfile.TemporaryDirectory(prefix="clusterprobe-base-") as tmp:
        work = Path(tmp)
        wheels = work / "wheels"
        runner.run(spec.download_command(wheels))
        has_rootfs = client is not None and engine.get_image(client, spec.rootfs_tag) is not None
        if force or not has_rootfs:
            rootfs = work / "rootfs"
            runner.run(spec.debootstrap_command(rootfs))
            archive = work / "rootfs.tar"
            runner.run(["tar", "-C", str(rootfs), "-cf", str(archive), "."])
            runner.run(["docker", "import", str(archive), spec.rootfs_tag])
        build = ["docker", "build", "--file", "Dockerfile", "--build-arg", f"ROOTFS_IMAGE={spec.rootfs_tag}",
                 "--build-arg", f"TORCH_VERSION={spec.torch_version}", "--tag", spec.tag, str(work)]
        runner.show(build)
        if runner.dry_run or client is None:
            return None
        context = work / "context.tar"
        with tarfile.open(context, "w") as tar:
            tar.add(spec.dockerfile, arcname="Dockerfile")
            tar.add(wheels, arcname="wheels")
        with context.open("rb") as fh:
            image_id, _ = engine.stream_build(
                client, runner.echo, label="local-base", context=fh, dockerfile="Dockerfile",
                buildargs={"ROOTFS_IMAGE": spec.rootfs_tag, "TORCH_VERSION": spec.torch_version},
                labels={"org.opencontainers.image.title": "clusterprobe torch CPU base"},
                tag=spec.tag,
            )
    return image_id
