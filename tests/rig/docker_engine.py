"""Start the Docker engine if none answers (a fresh CI machine runs none)."""

from __future__ import annotations

import os
import shutil
import subprocess

from tests.rig.net import RigError, wait_for

DOCKERD_LOG = "/var/log/clusterprobe-dockerd.log"


def engine_answers() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    proc = subprocess.run([docker, "info"], capture_output=True, check=False, timeout=30)
    return proc.returncode == 0


def ensure_engine(timeout: float = 90) -> None:
    if engine_answers():
        return
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise RigError("no Docker engine answers and dockerd is not installed: run `bash .ci/run` "
                       "or `apt-get install docker.io`")
    if os.geteuid() != 0:
        raise RigError("no Docker engine answers and starting dockerd needs root")
    # Left running after the tests on purpose: images and the layer cache stay for the next run.
    with open(DOCKERD_LOG, "ab") as log:
        subprocess.Popen([dockerd], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    wait_for(engine_answers, timeout, f"dockerd to answer (log: {DOCKERD_LOG})", interval=1)
