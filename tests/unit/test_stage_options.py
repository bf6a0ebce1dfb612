"""Every value that lands in a staged script is validated first: clear ConfigErrors naming the flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterprobe import stage
from clusterprobe.errors import ConfigError


def _validate(**overrides: object) -> stage.StageOptions:
    values: dict[str, object] = {"out": "/apps/jobs", "squash_dir": "/apps", "repository": "clusterprobe"}
    values.update(overrides)
    return stage.validate_options(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(("flag", "value", "words"), [
    ("partition", "x; rm -rf /", "--partition"),
    ("partition", "gpu debug", "--partition"),
    ("partition", "$(reboot)", "--partition"),
    ("account", "acct`id`", "--account"),
    ("account", "a,b", "--account"),
    ("time", "30 minutes", "--time"),
    ("time", "1:2:3:4", "--time"),
    ("out", "/apps/my jobs", "--out"),
    ("out", "/apps/jobs%j", "--out"),
    ("out", "/apps/it's", "--out"),
    ("out", "/apps/a\nb", "--out"),
    ("python", "python; id", "--python"),
    ("python", "~/venv/bin/python", "--python"),
    ("entrypoints", "relative/dir", "--entrypoints"),
    ("entrypoints", "/opt/$(id)", "--entrypoints"),
    ("runtime", "docker", "--runtime"),
    ("min_bytes", "lots", "--min-bytes"),
    ("max_bytes", "1G; id", "--max-bytes"),
    ("min_busbw", "fast", "--min-busbw"),
    ("min_busbw", "-1", "--min-busbw"),
    ("repository", "Clusterprobe:latest", "--repository"),
])
def test_bad_values_are_rejected_naming_the_flag(flag: str, value: object, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        _validate(**{flag: value})
    assert words in info.value.message
    assert info.value.fix


@pytest.mark.parametrize(("flag", "value"), [
    ("nodes", 0), ("nodes", 100000), ("gpus_per_node", 0), ("procs_per_node", -1), ("epochs", 0),
    ("timeout", 1), ("iters", 0),
])
def test_numbers_out_of_range_are_rejected(flag: str, value: int) -> None:
    with pytest.raises(ConfigError, match="--" + flag.replace("_", "-")):
        _validate(**{flag: value})


@pytest.mark.parametrize("mount", ["fsx:/fsx", "/fsx:/fs x", "/a,b:/c", "/a:/b:ro,rw", "/a:/b:c:d", ""])
def test_bad_mounts_are_rejected(mount: str) -> None:
    with pytest.raises(ConfigError, match="--mount"):
        _validate(mounts=[mount])


def test_mounts_parse_like_pyxis() -> None:
    options = _validate(mounts=["/fsx", "/data:/datasets:ro+rprivate", "/scratch:/scratch"])
    assert [m.spec() for m in options.mounts] == ["/fsx:/fsx", "/data:/datasets:ro+rprivate",
                                                   "/scratch:/scratch"]


def test_mount_is_refused_for_the_host_runtime() -> None:
    with pytest.raises(ConfigError, match="--mount is for --runtime pyxis"):
        _validate(runtime="host", mounts=["/fsx:/fsx"])


def test_unknown_collective_suggests_the_right_one() -> None:
    with pytest.raises(ConfigError, match="did you mean 'all_reduce'"):
        _validate(collectives=["allreduce"])


def test_sizes_must_be_in_order() -> None:
    with pytest.raises(ConfigError, match="larger than --max-bytes"):
        _validate(min_bytes="1M", max_bytes="64K")


@pytest.mark.parametrize("value", ["30", "30:00", "00:30:00", "1-00", "1-12:00", "2-00:00:00", "UNLIMITED"])
def test_slurm_time_formats_are_accepted(value: str) -> None:
    assert _validate(time=value).time == value


def test_defaults_per_runtime(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    pyxis = _validate(out="jobs", squash_dir="sq")
    assert (pyxis.python, pyxis.entrypoints) == ("python", "/opt/clusterprobe")
    assert pyxis.out == tmp_path / "jobs" and pyxis.squash_dir == tmp_path / "sq"  # relative: from cwd
    host = _validate(runtime="host")
    assert Path(host.python).is_absolute() and Path(host.python).exists()
    assert host.entrypoints.endswith("/entrypoints") and Path(host.entrypoints, "ddp_check.py").exists()


def test_partition_list_and_hash_in_paths_are_fine() -> None:
    options = _validate(partition="p5,p4d", account="ml.team-1", out="/fsx/run#2/jobs")
    assert options.partition == "p5,p4d"
    assert str(options.out) == "/fsx/run#2/jobs"
