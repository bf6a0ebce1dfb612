"""What the stage-jobs tests share: squash outputs to stage against, and shellcheck.

`placeholder_squash` writes a small file where `invoke squash` puts a variant's .sqsh, and the
manifest beside it exactly as squash writes it (docs/ARCHITECTURE.md). stage-jobs reads only the
manifest and the file's size, never the squashfs content, and Enroot/Pyxis cannot run here to read
one: a placeholder is all these tests need, and they say so.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

from clusterprobe import squash


def placeholder_squash(squash_dir: Path, variant: str, repository: str = "clusterprobe",
                       size: int = 4096) -> dict[str, object]:
    squash_dir.mkdir(parents=True, exist_ok=True)
    paths = squash.squash_paths(squash_dir, repository, variant)
    sqsh = paths.sqsh
    sqsh.write_bytes(b"hsqs" + bytes(size - 4))  # squashfs magic, then nothing: a placeholder
    manifest = {
        "variant": variant,
        "image": f"{repository}:{variant}-torch2.13.0-test",
        "image_id": "sha256:" + hashlib.sha256(f"{repository}-{variant}".encode()).hexdigest(),
        "sqsh": str(sqsh),
        "backend": "native",
        "compression": "zstd:3",
        "size_bytes": size,
        "created": "2026-01-02T03:04:05Z",
    }
    paths.manifest.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def shellcheck(*scripts: Path) -> subprocess.CompletedProcess[str]:
    """shellcheck at its strictest severity (style) on staged sbatch files."""
    tool = shutil.which("shellcheck")
    assert tool, "shellcheck is not installed (tools/bootstrap.sh installs it)"
    return subprocess.run([tool, "--shell=bash", "--severity=style", *map(str, scripts)],
                          capture_output=True, text=True, check=False, timeout=120)
