"""A real image registry (Debian's docker-registry, distribution 2.8) with htpasswd auth on
127.0.0.1. Docker treats 127.0.0.0/8 as insecure, so no TLS is needed."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import requests

from tests.rig.net import RigError, free_port, wait_for


@dataclass
class LocalRegistry:
    host: str
    username: str
    password: str
    root: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def catalog(self) -> list[str]:
        response = requests.get(f"http://{self.host}/v2/_catalog", auth=(self.username, self.password),
                                timeout=10)
        response.raise_for_status()
        return list(response.json().get("repositories") or [])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def start(self) -> None:
        """(Re)start on the same port and storage, e.g. after a test stopped it."""
        binary = shutil.which("docker-registry")
        if binary is None:
            raise RigError("docker-registry is not installed: apt-get install docker-registry")
        log = (self.root / "registry.log").open("ab")
        self.proc = subprocess.Popen([binary, "serve", str(self.root / "config.yml")],
                                     stdout=log, stderr=log, stdin=subprocess.DEVNULL)

        def answers() -> bool:
            try:
                return requests.get(f"http://{self.host}/v2/", timeout=1).status_code == 401
            except requests.RequestException:
                return False

        wait_for(answers, 30, f"the registry on {self.host}")


def start_registry(root: Path, username: str, password: str) -> LocalRegistry:
    htpasswd = shutil.which("htpasswd")
    if htpasswd is None:
        raise RigError("htpasswd is not installed: apt-get install apache2-utils")
    root.mkdir(parents=True, exist_ok=True)
    # -i: the password comes on stdin, never on a command line.
    subprocess.run([htpasswd, "-iBc", str(root / "htpasswd"), username], input=password.encode(),
                   check=True, capture_output=True)
    port = free_port()
    (root / "config.yml").write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
        f"auth:\n  htpasswd:\n    realm: clusterprobe-tests\n    path: {root / 'htpasswd'}\n"
    )
    registry = LocalRegistry(host=f"127.0.0.1:{port}", username=username, password=password, root=root)
    registry.start()
    return registry
