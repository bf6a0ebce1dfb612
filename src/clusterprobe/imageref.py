"""Docker image references: parsing, and what an ECR reference tells us (account, region)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusterprobe.errors import ConfigError

# host.dkr.ecr.REGION.amazonaws.com (and .com.cn in China regions)
ECR_HOST = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z]{2}(?:-[a-z]+)+-\d)\.amazonaws\.com(?:\.cn)?$"
)
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
DIGEST = re.compile(r"^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-fA-F0-9]{32,}$")
DOCKER_HUB = "docker.io"


@dataclass(frozen=True)
class EcrRegistry:
    account: str
    region: str

    @property
    def host(self) -> str:
        return f"{self.account}.dkr.ecr.{self.region}.amazonaws.com"


@dataclass(frozen=True)
class ImageRef:
    """`[registry/]repository[:tag][@digest]`; registry None means Docker Hub."""

    registry: str | None
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        ref = text.strip()
        if not ref or any(c.isspace() for c in ref):
            raise ConfigError(f"'{text}' is not a valid image reference (empty or contains spaces)")
        name, digest = ref, None
        if "@" in ref:
            name, digest = ref.split("@", 1)
            if not DIGEST.match(digest):
                raise ConfigError(f"'{text}': '{digest}' is not a valid digest")
        registry = None
        first, slash, rest = name.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost"):
            registry, name = first, rest
        tag = None
        last_slash = name.rfind("/")
        colon = name.rfind(":")
        if colon > last_slash:
            name, tag = name[:colon], name[colon + 1 :]
            if not TAG.match(tag):
                raise ConfigError(
                    f"'{text}': tag '{tag}' is not valid",
                    fix="tags use letters, digits, '_', '.' and '-' (at most 128 characters)",
                )
        for component in name.split("/"):
            if not COMPONENT.match(component):
                raise ConfigError(
                    f"'{text}': repository component '{component}' is not valid",
                    fix="repository names are lowercase letters, digits and separators ('.', '_', '-')",
                )
        return cls(registry=registry, repository=name, tag=tag, digest=digest)

    @property
    def name(self) -> str:
        """Registry and repository, without tag or digest."""
        return f"{self.registry}/{self.repository}" if self.registry else self.repository

    @property
    def registry_host(self) -> str:
        return self.registry or DOCKER_HUB

    @property
    def ecr(self) -> EcrRegistry | None:
        if not self.registry:
            return None
        match = ECR_HOST.match(self.registry)
        return EcrRegistry(match["account"], match["region"]) if match else None

    def with_tag(self, tag: str) -> ImageRef:
        return ImageRef(self.registry, self.repository, tag, None)

    def __str__(self) -> str:
        out = self.name
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out


def ecr_registry_of(host: str) -> EcrRegistry | None:
    """The account and region of an ECR registry host name, or None for any other registry."""
    match = ECR_HOST.match(host.strip().removeprefix("https://").rstrip("/"))
    return EcrRegistry(match["account"], match["region"]) if match else None


def sanitize_tag_part(value: str) -> str:
    """Make a version string usable inside a tag: '2.13.0+cpu' -> '2.13.0-cpu'."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", value).strip(".-")
