"""The --compression spelling, its mksquashfs options, and where the options come from."""

from __future__ import annotations

import subprocess

import pytest

from clusterprobe.compression import Compression, choose_compression
from clusterprobe.errors import ConfigError


@pytest.mark.parametrize(
    ("spelling", "options", "canonical"),
    [
        ("zstd:3", ("-comp", "zstd", "-Xcompression-level", "3"), "zstd:3"),
        ("ZSTD:03", ("-comp", "zstd", "-Xcompression-level", "3"), "zstd:3"),
        ("zstd", ("-comp", "zstd"), "zstd"),
        ("gzip:9", ("-comp", "gzip", "-Xcompression-level", "9"), "gzip:9"),
        ("lz4", ("-comp", "lz4"), "lz4"),
        ("lz4:hc", ("-comp", "lz4", "-Xhc"), "lz4:hc"),
        ("lzo-nod", ("-comp", "lzo", "-noD"), "lzo-nod"),
        ("lzo:1-nod", ("-comp", "lzo", "-Xcompression-level", "1", "-noD"), "lzo:1-nod"),
        ("xz", ("-comp", "xz"), "xz"),
    ],
)
def test_spellings_map_to_options_and_back(spelling: str, options: tuple[str, ...], canonical: str) -> None:
    parsed = Compression.parse(spelling)
    assert parsed.mksquashfs_options() == options
    assert parsed.spelling == canonical
    assert Compression.from_options(options) == parsed


@pytest.mark.parametrize(
    ("spelling", "message"),
    [
        ("zstd:23", "zstd levels are 1-22"),
        ("gzip:0", "gzip levels are 1-9"),
        ("zstd:fast", "zstd levels are 1-22"),
        ("lz4:9", "lz4 takes hc"),
        ("xz:9", "xz takes no setting"),
        ("zstandard", "did you mean 'zstd'?"),
        ("lzo -noD", "is not valid"),
        ("", "is not valid"),
    ],
)
def test_bad_spellings_name_the_problem(spelling: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        Compression.parse(spelling)
    assert message in str(info.value)
    assert info.value.fix


def test_every_spelled_option_set_is_accepted_by_mksquashfs(tmp_path) -> None:
    """Real mksquashfs, so a spelling can never produce options it rejects."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "file").write_text("data " * 1000)
    for spelling in ("zstd:3", "gzip:1", "lz4:hc", "lzo-nod", "xz", "lzo:9"):
        out = tmp_path / f"{spelling}.sqsh"
        options = Compression.parse(spelling).mksquashfs_options()
        proc = subprocess.run(["mksquashfs", str(tmp_path / "src"), str(out), "-no-progress", *options],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, (spelling, proc.stderr)
        info = subprocess.run(["unsquashfs", "-s", str(out)], capture_output=True, text=True, check=True).stdout
        assert f"Compression {options[1]}" in info


def test_options_outside_the_spelling_are_kept_raw() -> None:
    assert Compression.from_options(("-comp", "xz", "-Xbcj", "x86")) is None
    assert Compression.from_options(("-b", "1M")) is None
    assert Compression.from_options(("-comp", "zstd", "-Xcompression-level", "99")) is None


def test_flag_beats_environment_beats_default() -> None:
    env = {"ENROOT_SQUASH_OPTIONS": "-comp lz4 -Xhc"}
    flag = choose_compression("gzip:6", env)
    assert (flag.spelling, flag.source, flag.overridden_env) == ("gzip:6", "--compression", "-comp lz4 -Xhc")
    assert "overrides ENROOT_SQUASH_OPTIONS" in flag.describe()

    from_env = choose_compression(None, env)
    assert (from_env.spelling, from_env.options, from_env.source) == (
        "lz4:hc", ("-comp", "lz4", "-Xhc"), "ENROOT_SQUASH_OPTIONS")
    assert from_env.from_environment

    raw = choose_compression(None, {"ENROOT_SQUASH_OPTIONS": "-comp xz -b 1M"})
    assert raw.spelling == "-comp xz -b 1M"
    assert raw.options == ("-comp", "xz", "-b", "1M")

    default = choose_compression(None, {"ENROOT_SQUASH_OPTIONS": "  "})  # empty counts as unset
    assert (default.spelling, default.source) == ("zstd:3", "default")


def test_unsplittable_environment_options_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot be split"):
        choose_compression(None, {"ENROOT_SQUASH_OPTIONS": "-comp 'zstd"})
