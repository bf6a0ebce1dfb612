"""Load and validate images/variants.yaml into frozen dataclasses.

Every problem is reported with the file and line it sits on, and unknown names get a
"did you mean" suggestion. Nothing downstream ever sees an unvalidated value.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clusterprobe.errors import ConfigError

SCHEMA_VERSION = 1

# Environment variable names a job may set: what a shell accepts, nothing else.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
VARIANT_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,31}$")


class _LinedDict(dict[str, Any]):
    """A mapping that remembers the line of each key (1-based) and of itself."""

    line: int = 0
    key_lines: dict[str, int]


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that records line numbers, and rejects duplicate keys (YAML silently keeps the last)."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> _LinedDict:
    loader.flatten_mapping(node)
    result = _LinedDict()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            raise ConfigError(
                f"{loader.name}:{key_node.start_mark.line + 1}: keys must be strings, got {key!r}"
            )
        if key in result:
            raise ConfigError(
                f"{loader.name}:{key_node.start_mark.line + 1}: duplicate key '{key}' "
                f"(first at line {result.key_lines[key]})",
                fix="remove one of them",
            )
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def did_you_mean(name: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f"did you mean '{close[0]}'?" if close else f"valid: {', '.join(sorted(choices))}"


@dataclass(frozen=True)
class Variant:
    """One image variant, fully resolved (defaults applied, paths absolute)."""

    name: str
    description: str
    base_image: str
    dockerfile: Path
    entrypoints: Path
    gpu: bool
    fabric: str  # "efa" or "none": which job-time network settings the staged jobs export
    build_args: Mapping[str, str] = field(default_factory=dict)
    job_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class VariantsConfig:
    path: Path
    variants: Mapping[str, Variant]

    def get(self, name: str) -> Variant:
        if name not in self.variants:
            raise ConfigError(
                f"unknown variant '{name}' in {self.path}: {did_you_mean(name, list(self.variants))}",
                fix=f"use one of: {', '.join(self.variants)}",
            )
        return self.variants[name]

    def select(self, names: Sequence[str]) -> list[Variant]:
        """The named variants in the order given (duplicates dropped); all when `names` is empty."""
        if not names:
            return list(self.variants.values())
        return [self.get(n) for n in dict.fromkeys(names)]


_VARIANT_FIELDS: dict[str, type | tuple[type, ...]] = {
    "description": str,
    "base_image": str,
    "dockerfile": str,
    "entrypoints": str,
    "gpu": bool,
    "fabric": str,
    "build_args": dict,
    "job_env": dict,
}
_REQUIRED_VARIANT_FIELDS = ("base_image", "gpu")
_TOP_FIELDS = ("schema_version", "defaults", "variants")
FABRICS = ("efa", "none")


def _where(path: Path, mapping: Mapping[str, Any], key: str | None = None) -> str:
    line = None
    if isinstance(mapping, _LinedDict):
        line = mapping.key_lines.get(key, mapping.line) if key else mapping.line
    return f"{path}:{line}" if line else str(path)


def _check_keys(path: Path, mapping: Mapping[str, Any], allowed: Sequence[str], what: str) -> None:
    for key in mapping:
        if key not in allowed:
            raise ConfigError(
                f"{_where(path, mapping, key)}: unknown field '{key}' in {what}: "
                f"{did_you_mean(key, allowed)}",
                fix=f"fields allowed in {what}: {', '.join(allowed)}",
            )


def _str_map(path: Path, mapping: Mapping[str, Any], key: str, what: str) -> dict[str, str]:
    value = mapping.get(key) or {}
    out: dict[str, str] = {}
    for k, v in value.items():
        if not ENV_NAME.match(k):
            raise ConfigError(
                f"{_where(path, value, k)}: '{k}' in {what}.{key} is not a valid variable name",
                fix="use letters, digits and underscores, not starting with a digit",
            )
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise ConfigError(
                f"{_where(path, value, k)}: {what}.{key}.{k} must be a string or number, "
                f"got {type(v).__name__}",
                fix='quote the value, e.g. "1"',
            )
        out[k] = str(v)
    return out


def load_variants(path: str | Path, *, region: str | None = None) -> VariantsConfig:
    """Read and validate the variants file.

    `{region}` in a base image is replaced by `region` (the DLC registry is per region).
    """
    path = Path(path).resolve()
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(
            f"variants file {path} does not exist",
            fix="pass --variants-file or set clusterprobe.variants_file in invoke.yaml",
        ) from None
    try:
        data = yaml.load(text, Loader=_LineLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(
            f"{path}{line}: malformed YAML: {exc.problem or exc.context}",
            fix="fix the YAML syntax at that line",
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with 'variants:' at the top")
    _check_keys(path, data, _TOP_FIELDS, "the top level")
    version = data.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise ConfigError(
            f"{_where(path, data, 'schema_version')}: schema_version {version!r} is not supported "
            f"(this clusterprobe reads {SCHEMA_VERSION})"
        )
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise ConfigError(f"{_where(path, data, 'defaults')}: 'defaults' must be a mapping")
    _check_keys(path, defaults, list(_VARIANT_FIELDS), "defaults")
    raw_variants = data.get("variants")
    if not isinstance(raw_variants, dict) or not raw_variants:
        raise ConfigError(
            f"{_where(path, data, 'variants' if 'variants' in data else None)}: "
            "missing or empty 'variants' mapping",
            fix="define at least one variant under 'variants:'",
        )
    variants: dict[str, Variant] = {}
    for name, raw in raw_variants.items():
        if not VARIANT_NAME.match(name):
            raise ConfigError(
                f"{_where(path, raw_variants, name)}: variant name '{name}' is not valid",
                fix="use lowercase letters, digits, '.', '_' and '-' (at most 32 characters)",
            )
        if not isinstance(raw, dict):
            raise ConfigError(f"{_where(path, raw_variants, name)}: variant '{name}' must be a mapping")
        variants[name] = _variant(path, name, defaults, raw, region)
    return VariantsConfig(path=path, variants=variants)


def _variant(
    path: Path, name: str, defaults: Mapping[str, Any], raw: Mapping[str, Any], region: str | None
) -> Variant:
    what = f"variant '{name}'"
    _check_keys(path, raw, list(_VARIANT_FIELDS), what)
    merged: dict[str, Any] = {**defaults, **raw}
    for key in ("build_args", "job_env"):  # maps merge key by key, the variant winning
        merged[key] = {**(defaults.get(key) or {}), **(raw.get(key) or {})}
    for key in _REQUIRED_VARIANT_FIELDS:
        if key not in merged:
            raise ConfigError(
                f"{_where(path, raw)}: {what} is missing the required field '{key}'",
                fix=f"add '{key}:' to the variant or to 'defaults:'",
            )
    for key, typ in _VARIANT_FIELDS.items():
        if key in merged and merged[key] is not None and not isinstance(merged[key], typ):
            src = raw if key in raw else defaults
            expected = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
            raise ConfigError(
                f"{_where(path, src, key)}: {what}: '{key}' must be a {expected}, "
                f"got {type(merged[key]).__name__} ({merged[key]!r})"
            )
    fabric = merged.get("fabric", "none")
    if fabric not in FABRICS:
        raise ConfigError(
            f"{_where(path, raw, 'fabric')}: {what}: fabric '{fabric}' is unknown: "
            f"{did_you_mean(fabric, FABRICS)}"
        )
    base_image = merged["base_image"].strip()
    if "{region}" in base_image:
        if not region:
            raise ConfigError(
                f"{_where(path, raw, 'base_image')}: {what}: base image needs a region",
                fix="set clusterprobe.region in invoke.yaml or pass --region",
            )
        base_image = base_image.replace("{region}", region)
    if not base_image:
        raise ConfigError(f"{_where(path, raw, 'base_image')}: {what}: base_image is empty")
    folder = path.parent
    return Variant(
        name=name,
        description=merged.get("description", ""),
        base_image=base_image,
        dockerfile=(folder / merged.get("dockerfile", "Dockerfile")).resolve(),
        entrypoints=(folder / merged.get("entrypoints", "../entrypoints")).resolve(),
        gpu=merged["gpu"],
        fabric=fabric,
        build_args=_str_map(path, merged, "build_args", what),
        job_env=_str_map(path, merged, "job_env", what),
    )


def parse_key_values(items: Sequence[str], what: str) -> dict[str, str]:
    """`["A=1", "B=x"]` from the command line into a dict, with a clear error on a bad item."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not ENV_NAME.match(key):
            raise ConfigError(f"{what} '{item}' is not NAME=VALUE", fix=f"write it as {what} NAME=VALUE")
        out[key] = value
    return out
