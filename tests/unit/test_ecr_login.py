"""ECR login pieces that need no daemon. Where AWS's own error answers are needed (expired
credentials), botocore's Stubber stands in for AWS, which cannot be reached here."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from clusterprobe import ecr
from clusterprobe.errors import AuthError, ConfigError


def test_region_comes_from_ecr_host() -> None:
    target = ecr.resolve_target("https://123456789012.dkr.ecr.eu-west-1.amazonaws.com/", None)
    assert target == ecr.LoginTarget("123456789012.dkr.ecr.eu-west-1.amazonaws.com", "eu-west-1")


def test_wrong_region_is_rejected() -> None:
    with pytest.raises(ConfigError, match="is in region eu-west-1, but the region given is us-east-1"):
        ecr.resolve_target("123456789012.dkr.ecr.eu-west-1.amazonaws.com", "us-east-1")
    with pytest.raises(ConfigError, match="not an AWS region name"):
        ecr.resolve_target("127.0.0.1:5000", "useast1")


def test_non_ecr_host_needs_region() -> None:
    with pytest.raises(ConfigError, match="its region is unknown"):
        ecr.resolve_target("mirror.example.com", None)
    assert ecr.resolve_target("mirror.example.com", None, default_region="eu-west-1").region == "eu-west-1"
    # the site default never contradicts an ECR host: the host's region wins
    assert ecr.resolve_target("123456789012.dkr.ecr.us-west-2.amazonaws.com", None, "eu-west-1").region == "us-west-2"
    with pytest.raises(ConfigError, match="no registry to log in to"):
        ecr.resolve_target("", "us-east-1")


def test_enroot_line_forms() -> None:
    target = ecr.LoginTarget("1.dkr.ecr.us-east-1.amazonaws.com", "us-east-1")
    assert ecr.enroot_credentials_line(target, None) == (
        "machine 1.dkr.ecr.us-east-1.amazonaws.com login AWS password "
        "$(aws ecr get-login-password --region us-east-1)"
    )
    assert ecr.enroot_credentials_line(target, "pw").endswith("password pw")


@pytest.mark.parametrize(
    ("code", "message"),
    [("ExpiredTokenException", "have expired"), ("UnrecognizedClientException", "rejected the credentials"),
     ("AccessDeniedException", "ecr:GetAuthorizationToken")],
)
def test_aws_errors_become_auth_errors(monkeypatch: pytest.MonkeyPatch, code: str, message: str) -> None:
    """Stand-in: botocore's Stubber answers as AWS would; real AWS is unreachable here."""
    client = boto3.client("ecr", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    stubber = Stubber(client)
    stubber.add_client_error("get_authorization_token", service_error_code=code, service_message="nope")
    stubber.activate()
    monkeypatch.setattr(boto3.session.Session, "client", lambda self, *a, **k: client)
    with pytest.raises(AuthError) as err:
        ecr.fetch_password("us-east-1")
    assert message in str(err.value)
    assert err.value.exit_code == 8
