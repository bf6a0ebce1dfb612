"""Small JSON records keyed by image ID (probed versions, smoke-test verdicts).

An image ID is the digest of the image's config, so a record can never describe another image:
an unchanged image skips its probe and smoke test, and any change gives a new ID and a new run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from clusterprobe.files import write_atomic


def cache_dir() -> Path:
    root = os.environ.get("CLUSTERPROBE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "clusterprobe"
    )
    return Path(root)


def _path(kind: str, image_id: str) -> Path:
    return cache_dir() / kind / f"{image_id.removeprefix('sha256:')}.json"


def load(kind: str, image_id: str) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(_path(kind, image_id).read_text())
    except (OSError, ValueError):
        return None
    return data


def store(kind: str, image_id: str, record: dict[str, Any]) -> None:
    path = _path(kind, image_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(record, indent=2, sort_keys=True))
