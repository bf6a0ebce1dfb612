"""Per-site settings: the `clusterprobe:` section of invoke.yaml, overridable by INVOKE_CLUSTERPROBE_*
environment variables and by command-line flags. Validated once into a frozen dataclass."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from clusterprobe.config import did_you_mean
from clusterprobe.errors import ConfigError

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Settings:
    variants_file: Path = PROJECT_ROOT / "images" / "variants.yaml"
    repository: str = "clusterprobe"  # local image name, and the repository pushed to
    registry: str = ""  # push target; empty: no default registry
    region: str = "us-east-1"
    squash_dir: Path = Path("/apps")
    jobs_dir: Path = Path("/apps/clusterprobe-jobs")
    local_base_tag: str = "clusterprobe/torch-cpu-base:2.13.0-py3.11"
    torch_version: str = "2.13.0"

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with the flags that were given (None means 'not given')."""
        given = {k: v for k, v in overrides.items() if v not in (None, "")}
        for key in ("variants_file", "squash_dir", "jobs_dir"):
            if key in given:
                given[key] = Path(given[key])
        return replace(self, **given)


def from_mapping(raw: Mapping[str, Any], base_dir: Path = PROJECT_ROOT) -> Settings:
    """Settings from the invoke config section; relative paths are relative to `base_dir`."""
    names = [f.name for f in fields(Settings)]
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in names:
            raise ConfigError(
                f"invoke.yaml: unknown setting 'clusterprobe.{key}': {did_you_mean(key, names)}",
                fix=f"settings are: {', '.join(names)}",
            )
        if value is None:
            continue
        if key in ("variants_file", "squash_dir", "jobs_dir"):
            path = Path(str(value)).expanduser()
            value = path if path.is_absolute() else (base_dir / path)
        else:
            value = str(value)
        values[key] = value
    return Settings(**values)
