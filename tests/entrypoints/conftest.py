"""The entrypoint tests: the scripts' modules importable by name, and a `launch` fixture."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.entrypoints.procs import ENTRYPOINTS, Launch

# The scripts import their shared module by name, as they do from /opt/clusterprobe.
if str(ENTRYPOINTS) not in sys.path:
    sys.path.insert(0, str(ENTRYPOINTS))


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Launch]:
    """Start processes under a deadline; whatever is still running at the end is killed."""
    runner = Launch(tmp_path)
    yield runner
    runner.kill_all()
