"""ECR login: a token from the AWS API (boto3), handed to `docker login` on stdin only.

The password never appears in argv, in anything printed, or in a log. For Pyxis/enroot on the
cluster we write enroot's credentials line, by default as enroot's own `$(aws ecr
get-login-password ...)` form so that no token is stored and nothing expires.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from pathlib import Path

from clusterprobe.errors import AuthError, ConfigError
from clusterprobe.files import write_atomic
from clusterprobe.imageref import ecr_registry_of
from clusterprobe.runner import Runner

REGION = re.compile(r"^[a-z]{2}(?:-[a-z]+)+-\d$")
EXPIRED_CODES = {"ExpiredTokenException", "ExpiredToken", "RequestExpired", "TokenRefreshRequired"}
REJECTED_CODES = {"UnrecognizedClientException", "InvalidClientTokenId", "InvalidSignatureException",
                  "SignatureDoesNotMatch"}


@dataclass(frozen=True)
class LoginTarget:
    """Where to log in and which region's ECR API issues the token."""

    registry: str
    region: str


def resolve_target(registry: str, region: str | None, default_region: str | None = None) -> LoginTarget:
    """Region comes from an ECR host name; for other hosts (mirrors, tests) it is `region`, else
    `default_region` (the site setting). A region that contradicts the host name is an error,
    not a silent override.
    """
    registry = registry.strip().removeprefix("https://").rstrip("/")
    if not registry:
        raise ConfigError(
            "no registry to log in to",
            fix="pass --registry ACCOUNT.dkr.ecr.REGION.amazonaws.com or set clusterprobe.registry",
        )
    ecr = ecr_registry_of(registry)
    if ecr is not None:
        if region and region != ecr.region:
            raise ConfigError(
                f"registry {registry} is in region {ecr.region}, but the region given is {region}",
                fix=f"drop --region (it is read from the registry) or pass --region {ecr.region}",
            )
        region = ecr.region
    region = region or default_region
    if not region:
        raise ConfigError(
            f"{registry} is not an ECR host name, so its region is unknown",
            fix="pass --region (the region whose ECR API issues the token)",
        )
    if not REGION.match(region):
        raise ConfigError(f"'{region}' is not an AWS region name", fix="use a name such as us-east-1")
    return LoginTarget(registry=registry, region=region)


def fetch_password(region: str) -> str:
    """The ECR password for `region` via ecr:GetAuthorizationToken (valid 12 h on real ECR)."""
    import boto3
    import botocore.exceptions as bce

    try:
        client = boto3.session.Session().client("ecr", region_name=region)
        response = client.get_authorization_token()
    except bce.ProfileNotFound as exc:
        raise AuthError(f"AWS profile not found: {exc}",
                        fix="check AWS_PROFILE against the profiles in ~/.aws/config") from None
    except bce.NoCredentialsError:
        raise AuthError(
            "no AWS credentials found",
            fix="configure them (aws configure, AWS_PROFILE, aws sso login, or an instance role)",
        ) from None
    except bce.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        message = exc.response.get("Error", {}).get("Message", str(exc))
        if code in EXPIRED_CODES:
            raise AuthError(
                f"the AWS credentials have expired ({code})",
                fix="refresh them (aws sso login, or new session credentials) and retry",
            ) from None
        if code in REJECTED_CODES:
            raise AuthError(
                f"AWS rejected the credentials in region {region} ({code}: {message})",
                fix="check the access key, the profile, and that the region is enabled for the account",
            ) from None
        raise AuthError(f"ECR refused the token request in region {region}: {code}: {message}",
                        fix="the identity needs ecr:GetAuthorizationToken") from None
    except bce.EndpointConnectionError:
        raise AuthError(
            f"cannot reach the ECR API in region '{region}'",
            fix="check the region name and the network (proxy, VPC endpoint)",
        ) from None
    except bce.BotoCoreError as exc:
        raise AuthError(f"AWS API call failed in region {region}: {exc}") from None
    data = response["authorizationData"][0]
    user, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
    if user != "AWS" or not password:
        raise AuthError("ECR returned a token in an unexpected format")
    return password


def docker_login(runner: Runner, target: LoginTarget) -> None:
    """`aws ecr get-login-password | docker login --password-stdin`, with boto3 as the first half."""
    login = ["docker", "login", "--username", "AWS", "--password-stdin", target.registry]
    if runner.dry_run:
        runner.echo(f"{runner.prefix}aws ecr get-login-password --region {target.region} | {' '.join(login)}")
        return
    password = fetch_password(target.region)
    runner.echo(f"{runner.prefix}aws ecr get-login-password --region {target.region} | {' '.join(login)}")
    proc = runner.run(login, secret_input=password, capture=True, check=False, quiet=True)
    assert proc is not None
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().replace(password, "***")
        raise AuthError(
            f"docker login to {target.registry} failed: {detail}",
            fix="check that the registry host is right and that the Docker engine reaches it",
        )


def enroot_credentials_line(target: LoginTarget, password: str | None) -> str:
    """enroot's netrc-style line; without a password, enroot runs the AWS CLI itself at import."""
    secret = password if password is not None else f"$(aws ecr get-login-password --region {target.region})"
    return f"machine {target.registry} login AWS password {secret}"


def write_enroot_credentials(
    runner: Runner, path: Path, target: LoginTarget, *, store_token: bool
) -> None:
    """Add or replace the line for `target.registry` in enroot's credentials file (mode 0600).

    Written to a temporary file in the same folder and renamed, so a reader never sees half a file.
    """
    what = "the current token" if store_token else "an `aws ecr get-login-password` call"
    runner.echo(f"{runner.prefix}# write {path} (mode 0600): machine {target.registry} -> {what}")
    if runner.dry_run:
        return
    password = fetch_password(target.region) if store_token else None
    line = enroot_credentials_line(target, password)
    path = path.expanduser()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    kept: list[str] = []
    if path.exists():
        kept = [
            old for old in path.read_text().splitlines()
            if old.split()[:2] != ["machine", target.registry]
        ]
    write_atomic(path, "\n".join([*kept, line]) + "\n", mode=0o600)
