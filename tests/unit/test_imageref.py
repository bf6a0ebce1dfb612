from __future__ import annotations

import pytest

from clusterprobe.errors import ConfigError
from clusterprobe.imageref import ImageRef, ecr_registry_of, sanitize_tag_part


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest"),
    [
        ("python", None, "python", None, None),
        ("pytorch/pytorch:2.9.0-cuda12.8-cudnn9-runtime", None, "pytorch/pytorch",
         "2.9.0-cuda12.8-cudnn9-runtime", None),
        ("127.0.0.1:5000/clusterprobe:cpu", "127.0.0.1:5000", "clusterprobe", "cpu", None),
        ("localhost/a/b", "localhost", "a/b", None, None),
        ("ghcr.io/org/img@sha256:" + "a" * 64, "ghcr.io", "org/img", None, "sha256:" + "a" * 64),
    ],
)
def test_parse(text: str, registry: str | None, repository: str, tag: str | None, digest: str | None) -> None:
    ref = ImageRef.parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag, digest)
    assert str(ref) == text


def test_ecr_detection() -> None:
    ref = ImageRef.parse("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.9.0-gpu")
    assert ref.ecr is not None and (ref.ecr.account, ref.ecr.region) == ("763104351884", "us-east-1")
    assert ImageRef.parse("ghcr.io/x/y:1").ecr is None
    assert ecr_registry_of("https://123456789012.dkr.ecr.eu-west-2.amazonaws.com") is not None
    assert ecr_registry_of("127.0.0.1:5000") is None


@pytest.mark.parametrize("bad", ["", "Upper/case:1", "a b", "x:bad tag", "x@sha256:zz", "x:" + "t" * 129])
def test_invalid(bad: str) -> None:
    with pytest.raises(ConfigError):
        ImageRef.parse(bad)


def test_sanitize_tag_part() -> None:
    assert sanitize_tag_part("2.13.0+cpu") == "2.13.0-cpu"
