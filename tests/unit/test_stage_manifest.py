"""stage-jobs reads the squash manifest and refuses a missing or disagreeing one.

The .sqsh files here are placeholders written by the test (tests/rig/staging.py): stage-jobs reads
only the manifest and the file's size, never the squashfs content.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterprobe import stage
from clusterprobe.errors import PreflightError
from tests.rig.staging import placeholder_squash


def _edit(squash_dir: Path, **changes: object) -> None:
    path = squash_dir / "clusterprobe-cpu.sqsh.json"
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_reads_the_manifest_of_an_existing_sqsh(tmp_path: Path) -> None:
    written = placeholder_squash(tmp_path, "cpu")
    manifest = stage.read_squash_manifest(tmp_path, "clusterprobe", "cpu")
    assert manifest.sqsh == tmp_path / "clusterprobe-cpu.sqsh"
    assert manifest.image_id == written["image_id"]
    assert manifest.size_bytes == 4096


def test_missing_manifest_says_to_squash(tmp_path: Path) -> None:
    with pytest.raises(PreflightError) as info:
        stage.read_squash_manifest(tmp_path, "clusterprobe", "cpu")
    assert "has not been squashed" in info.value.message
    assert info.value.fix == f"run `invoke squash --variant cpu --out {tmp_path}` (or pass --squash-dir)"


def test_missing_sqsh_is_refused(tmp_path: Path) -> None:
    placeholder_squash(tmp_path, "cpu")
    (tmp_path / "clusterprobe-cpu.sqsh").unlink()
    with pytest.raises(PreflightError, match="does not exist"):
        stage.read_squash_manifest(tmp_path, "clusterprobe", "cpu")


def test_sqsh_without_manifest_is_refused(tmp_path: Path) -> None:
    placeholder_squash(tmp_path, "cpu")
    (tmp_path / "clusterprobe-cpu.sqsh.json").unlink()
    with pytest.raises(PreflightError, match="has no manifest"):
        stage.read_squash_manifest(tmp_path, "clusterprobe", "cpu")


@pytest.mark.parametrize(("changes", "words"), [
    ({"size_bytes": 1234}, "records 1234 bytes but the file has 4096"),
    ({"variant": "efa"}, "it is for variant 'efa'"),
    ({"sqsh": "/elsewhere/clusterprobe-cpu.sqsh"}, "it names /elsewhere/clusterprobe-cpu.sqsh"),
    ({"image_id": "sha256:short"}, "is not sha256:<64 hex>"),
    ({"image": "bad image\nname"}, "is not a one-line string"),
])
def test_manifest_that_disagrees_with_the_file_is_refused(tmp_path: Path, changes: dict[str, object],
                                                          words: str) -> None:
    placeholder_squash(tmp_path, "cpu")
    _edit(tmp_path, **changes)
    with pytest.raises(PreflightError) as info:
        stage.read_squash_manifest(tmp_path, "clusterprobe", "cpu")
    assert words in info.value.message
    assert "invoke squash --variant cpu" in (info.value.fix or "")


def test_broken_json_is_refused(tmp_path: Path) -> None:
    placeholder_squash(tmp_path, "cpu")
    (tmp_path / "clusterprobe-cpu.sqsh.json").write_text('{"variant": "cpu",')
    with pytest.raises(PreflightError, match="not readable JSON"):
        stage.read_squash_manifest(tmp_path, "clusterprobe", "cpu")


def test_host_runtime_needs_no_manifest(tmp_path: Path) -> None:
    from clusterprobe.config import load_variants
    from tests.conftest import ROOT

    variants = load_variants(ROOT / "images" / "variants.yaml", region="us-east-1").select(["cpu"])
    options = stage.validate_options(out=tmp_path / "jobs", squash_dir=tmp_path, repository="clusterprobe",
                                     runtime="host")
    assert stage.read_manifests(variants, options) == {"cpu": None}
