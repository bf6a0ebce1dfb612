"""The ECR API on loopback (moto), for the token exchange. AWS itself cannot be reached here:
this is the one stand-in, and it serves the real boto3 calls our code makes."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import boto3
from moto.server import ThreadedMotoServer

from tests.rig.net import free_port, port_open, wait_for

FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_SESSION_TOKEN": "testing"}


@dataclass
class EcrEmulator:
    endpoint: str
    region: str = "us-east-1"
    server: ThreadedMotoServer | None = field(default=None, repr=False)

    @property
    def env(self) -> dict[str, str]:
        """Environment under which boto3 (in-process or in a subprocess) talks to the emulator."""
        return {**FAKE_CREDENTIALS, "AWS_DEFAULT_REGION": self.region, "AWS_ENDPOINT_URL_ECR": self.endpoint,
                "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null"}

    def password(self) -> str:
        """The password the emulator hands out (what a registry paired with it must accept)."""
        client = boto3.client("ecr", region_name=self.region, endpoint_url=self.endpoint,
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        token = client.get_authorization_token()["authorizationData"][0]["authorizationToken"]
        return base64.b64decode(token).decode().partition(":")[2]

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def start_ecr_emulator() -> EcrEmulator:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    wait_for(lambda: port_open(port), 30, "the ECR API emulator")
    return EcrEmulator(endpoint=f"http://127.0.0.1:{port}", server=server)
