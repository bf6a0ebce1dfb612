"""The entrypoint tests: the scripts' modules importable by name, and a `launch` fixture."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# `tests` is importable however pytest was started (the root conftest relies on the same).
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.entrypoints.procs import ENTRYPOINTS, Launch  # noqa: E402

# The scripts import their shared module by name, as they do from /opt/clusterprobe.
if str(ENTRYPOINTS) not in sys.path:
    sys.path.insert(0, str(ENTRYPOINTS))


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Launch]:
    """Start processes under a deadline; whatever is still running at the end is killed."""
    runner = Launch(tmp_path)
    yield runner
    runner.kill_all()
