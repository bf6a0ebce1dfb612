"""A small Docker Registry HTTP API v2 client: read a tag's manifest, with Basic or Bearer auth.

Credentials come from the Docker client configuration (what `docker login` stored, credential
helpers included), so ECR, GHCR and a local htpasswd registry all work the same way.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

import docker.auth
import requests

from clusterprobe.errors import RegistryError

MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    ]
)


@dataclass(frozen=True)
class RemoteManifest:
    digest: str
    media_type: str
    config_digest: str | None  # None for an index (multi-platform) manifest


def is_loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def docker_credentials(registry: str) -> tuple[str, str] | None:
    """(username, password) that `docker login` stored for `registry`, if any."""
    config = docker.auth.load_config()
    auth = config.resolve_authconfig(registry)
    if not auth:
        return None
    # Entries from config.json use lowercase keys, those from a credential helper capitalised ones.
    user = auth.get("username") or auth.get("Username")
    password = auth.get("password") or auth.get("Password")
    return (user, password) if user and password else None


class RegistryClient:
    def __init__(self, registry: str, credentials: tuple[str, str] | None = None, timeout: float = 30):
        self.registry = registry
        # Docker itself talks plain HTTP to registries on loopback (127.0.0.0/8 is "insecure").
        scheme = "http" if is_loopback(registry) else "https"
        self.base = f"{scheme}://{registry}"
        self.credentials = credentials if credentials is not None else docker_credentials(registry)
        self.session = requests.Session()
        self.timeout = timeout
        self._token: str | None = None

    def manifest(self, repository: str, reference: str) -> RemoteManifest | None:
        """The manifest of `repository:reference`, or None when the tag does not exist."""
        url = f"{self.base}/v2/{repository}/manifests/{reference}"
        response = self._get(url, scope=f"repository:{repository}:pull")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise RegistryError(
                f"{self.registry}: GET manifest {repository}:{reference} answered "
                f"{response.status_code}: {response.text[:200]}"
            )
        body: dict[str, Any] = response.json()
        media_type = response.headers.get("Content-Type", body.get("mediaType", ""))
        digest = response.headers.get("Docker-Content-Digest", "")
        config = body.get("config") or {}
        return RemoteManifest(digest=digest, media_type=media_type, config_digest=config.get("digest"))

    def image_config(self, repository: str, digest: str) -> dict[str, Any]:
        """The image config blob (what `docker inspect` shows as Config, labels included)."""
        response = self._get(f"{self.base}/v2/{repository}/blobs/{digest}", scope=f"repository:{repository}:pull")
        if response.status_code != 200:
            raise RegistryError(f"{self.registry}: GET config blob {digest} of {repository} answered "
                                f"{response.status_code}")
        body: dict[str, Any] = response.json()
        return body

    def tags(self, repository: str) -> list[str]:
        response = self._get(f"{self.base}/v2/{repository}/tags/list", scope=f"repository:{repository}:pull")
        if response.status_code == 404:
            return []
        if response.status_code != 200:
            raise RegistryError(f"{self.registry}: tags/list of {repository} answered {response.status_code}")
        return list(response.json().get("tags") or [])

    def _get(self, url: str, scope: str) -> requests.Response:
        headers = {"Accept": MANIFEST_TYPES}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        try:
            response = self.session.get(url, headers=headers, timeout=self.timeout)
            if response.status_code == 401:
                response = self._retry_authenticated(url, headers, response, scope)
        except requests.RequestException as exc:
            raise RegistryError(
                f"cannot reach registry {self.registry}: {exc}",
                fix="check the registry address and the network",
            ) from None
        if response.status_code == 401:
            raise RegistryError(
                f"registry {self.registry} refused our credentials",
                fix=f"log in first: invoke login --registry {self.registry}",
            )
        return response

    def _retry_authenticated(
        self, url: str, headers: dict[str, str], challenge: requests.Response, scope: str
    ) -> requests.Response:
        header = challenge.headers.get("WWW-Authenticate", "")
        scheme, _, params_text = header.partition(" ")
        params = dict(re.findall(r'(\w+)="([^"]*)"', params_text))
        if scheme.lower() == "basic":
            if not self.credentials:
                return challenge
            return self.session.get(url, headers=headers, auth=self.credentials, timeout=self.timeout)
        if scheme.lower() == "bearer" and "realm" in params:
            query = {"service": params.get("service", ""), "scope": params.get("scope", scope)}
            token_response = self.session.get(
                params["realm"], params=query, auth=self.credentials, timeout=self.timeout
            )
            if token_response.status_code != 200:
                return challenge
            body = token_response.json()
            self._token = body.get("token") or body.get("access_token")
            headers = {**headers, "Authorization": f"Bearer {self._token}"}
            return self.session.get(url, headers=headers, timeout=self.timeout)
        return challenge
