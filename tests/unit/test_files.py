"""The one atomic-write helper (cache records, enroot credentials, squash manifests)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from clusterprobe.files import write_atomic


def test_replaces_whole_with_the_mode_asked(tmp_path: Path) -> None:
    target = tmp_path / "creds"
    target.write_text("old\n")
    write_atomic(target, "new\n", mode=0o600)
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    write_atomic(target, "public\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["creds"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "manifest.json"
    target.write_text("old\n")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(target, "\udcff not encodable")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]
