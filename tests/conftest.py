"""Session fixtures of the test rig, shared by every test directory.

Real parts only: the Docker engine (started if none answers), a torch base image built locally
(cached by tag), an htpasswd registry on loopback, the ECR API emulator (moto: AWS itself is the
one thing that cannot run here), real Slurm daemons (tests/rig/slurm.py).

Everything the tests write to the Docker client configuration and to clusterprobe's cache goes
to a per-session folder, so a developer's ~/.docker and ~/.cache are never touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

_SESSION_DIR = Path(tempfile.mkdtemp(prefix="clusterprobe-tests-"))
os.environ["DOCKER_CONFIG"] = str(_SESSION_DIR / "docker-config")
os.environ["CLUSTERPROBE_CACHE_DIR"] = str(_SESSION_DIR / "cache")
os.environ.setdefault("INVOKE_CLUSTERPROBE_REGION", "us-east-1")

from clusterprobe.settings import Settings  # noqa: E402
from tests.rig.docker_engine import ensure_engine  # noqa: E402
from tests.rig.ecr_emulator import EcrEmulator, start_ecr_emulator  # noqa: E402
from tests.rig.filesystems import mount_tmpfs, unmount  # noqa: E402
from tests.rig.registry import LocalRegistry, start_registry  # noqa: E402
from tests.rig.slurm import ContainerSlurm, LocalSlurm, start_container_cluster, start_local_slurm  # noqa: E402

LOCAL_BASE_TAG = Settings().local_base_tag


def run_invoke(
    *args: str,
    env: Mapping[str, str] | None = None,
    unset: tuple[str, ...] = (),
    timeout: float = 900,
    cwd: Path = ROOT,
) -> subprocess.CompletedProcess[str]:
    """Run `invoke ARGS` as a user would, from the checkout; output captured as text.

    `env` adds to this process's environment, `unset` removes variables from it.
    """
    full_env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in unset}
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The session folder holds the registry's storage (hundreds of MB of pushed layers): remove it
    once the session fixtures are torn down, so runs don't pile up in /tmp."""
    import shutil

    shutil.rmtree(_SESSION_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def session_dir() -> Path:
    return _SESSION_DIR


@pytest.fixture(scope="session")
def docker_client():  # type: ignore[no-untyped-def]
    from clusterprobe import engine

    ensure_engine()
    client = engine.connect()
    yield client
    client.close()


@pytest.fixture(scope="session")
def local_base(docker_client) -> str:  # type: ignore[no-untyped-def]
    """The torch CPU base image, built without any registry (cached by tag across runs)."""
    from clusterprobe.localbase import LocalBaseSpec, build_local_base
    from clusterprobe.runner import Runner

    build_local_base(docker_client, Runner(), LocalBaseSpec(tag=LOCAL_BASE_TAG, torch_version="2.13.0"))
    return LOCAL_BASE_TAG


@pytest.fixture(scope="session")
def cpu_image(docker_client, local_base):  # type: ignore[no-untyped-def]
    """The cpu variant, really built and smoke-tested once per session; a BuildResult."""
    from clusterprobe import build
    from clusterprobe.config import load_variants
    from clusterprobe.runner import Runner

    config = load_variants(ROOT / "images" / "variants.yaml", region="us-east-1")
    (spec,) = build.plan_builds(config, ["cpu"], repository="clusterprobe",
                                base_images={"cpu": local_base})
    result = build.execute_build(docker_client, Runner(), spec)
    assert result is not None
    return result


SQUASH_TEST_REPOSITORY = "clusterprobe-squashtest"
SQUASH_TEST_DOCKERFILE = """\
FROM {rootfs}
ENV PATH=/opt/tools/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ENV GREETING="it's a \\"test\\""
WORKDIR /work/dir
VOLUME ["/data", "/scratch"]
LABEL org.example.purpose="squash tests"
ENTRYPOINT ["/bin/sh", "-c"]
CMD ["echo \\"cmd ran in $PWD\\""]
"""


@pytest.fixture(scope="session")
def squash_test_image(docker_client, local_base):  # type: ignore[no-untyped-def]
    """A 265 MB Debian image (the local base's rootfs) with Env, WorkingDir, Volumes, Entrypoint,
    Cmd and a label, tagged like a built variant: clusterprobe-squashtest:cpu and :cpu-torch0.0-squashtest.
    For squash tests that need no torch. Returns (repository, versioned tag, image ID)."""
    import io

    from clusterprobe.localbase import LocalBaseSpec

    rootfs = LocalBaseSpec(tag=local_base, torch_version="2.13.0").rootfs_tag
    dockerfile = SQUASH_TEST_DOCKERFILE.format(rootfs=rootfs).encode()
    image, _ = docker_client.images.build(fileobj=io.BytesIO(dockerfile), rm=True, pull=False)
    versioned = f"{SQUASH_TEST_REPOSITORY}:cpu-torch0.0-squashtest"
    for tag in (f"{SQUASH_TEST_REPOSITORY}:cpu", versioned):
        image.tag(*tag.split(":"))
    return SQUASH_TEST_REPOSITORY, versioned, str(image.id)


@pytest.fixture(scope="session")
def ecr_emulator() -> Iterator[EcrEmulator]:
    emulator = start_ecr_emulator()
    yield emulator
    emulator.stop()


@pytest.fixture(scope="session")
def registry(ecr_emulator: EcrEmulator, session_dir: Path) -> Iterator[LocalRegistry]:
    """A real registry that accepts the ECR emulator's token, as ECR accepts its own."""
    reg = start_registry(session_dir / "registry", "AWS", ecr_emulator.password())
    yield reg
    reg.stop()


@pytest.fixture
def aws_env(ecr_emulator: EcrEmulator, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """AWS variables pointing boto3 at the emulator, set in-process and returned for subprocesses."""
    for key, value in ecr_emulator.env.items():
        monkeypatch.setenv(key, value)
    return ecr_emulator.env


@pytest.fixture(scope="session")
def slurm_local() -> Iterator[LocalSlurm]:
    """Real slurmctld + slurmd (+ munged) on this host, one node; shared with concurrent sessions."""
    cluster = start_local_slurm()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def slurm_cluster(docker_client, cpu_image, session_dir: Path) -> Iterator[ContainerSlurm]:  # type: ignore[no-untyped-def]
    """Two Slurm nodes (node0, node1) as containers of the cpu image with slurmd added; the folder
    `slurm_cluster.shared` is mounted at the same path on both and on this host."""
    cluster = start_container_cluster(docker_client, cpu_image.image_id, session_dir / "slurm-shared",
                                      session_dir / "slurm-cluster-conf")
    yield cluster
    cluster.stop()


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs for one test: a real file system whose free space nothing else changes."""
    mountpoint = tmp_path / "small-fs"
    mount_tmpfs(mountpoint, 64 * 1024 * 1024)
    yield mountpoint
    unmount(mountpoint)


@pytest.fixture
def image_inputs(tmp_path: Path, local_base: str) -> Path:
    """A copy of the image inputs (Dockerfile, entrypoints; not a git checkout, so the revision is
    'nogit') with a variants file holding only the cpu variant on the local base. Tests edit it
    freely; the checkout stays untouched."""
    import shutil

    shutil.copytree(ROOT / "entrypoints", tmp_path / "entrypoints", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "images").mkdir()
    shutil.copy(ROOT / "images" / "Dockerfile", tmp_path / "images" / "Dockerfile")
    (tmp_path / "images" / "variants.yaml").write_text(
        f"variants:\n  cpu:\n    base_image: {local_base}\n    gpu: false\n"
    )
    return tmp_path
