"""squashfs compression: one short spelling (`zstd:3`, `lz4:hc`, `lzo-nod`) <-> mksquashfs options.

Grammar: `ALGORITHM[:SETTING][-nod]`
  zstd[:1-22]   gzip[:1-9]   lzo[:1-9]   lz4[:hc]   xz
  `-nod` leaves data blocks uncompressed (mksquashfs -noD); `lzo-nod` is enroot's default.

The default, `zstd:3`, was chosen by measurement on the 1.2 GB torch image (benchmarks/bench_squash.py,
figures in docs/_readme_squash.md): 3-4x faster to write than enroot's default `lzo -noD` and 2.5x
smaller; `zstd:1` is 2 s faster but 5% larger, and the file is read by every job. Reading it needs
squashfs zstd support (Linux >= 4.14, squashfs-tools >= 4.4, squashfuse with zstd).

Where the options come from, in order: `--compression`, ENROOT_SQUASH_OPTIONS from the user's
environment (enroot's own setting, honoured by both backends), the default.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from clusterprobe.config import did_you_mean
from clusterprobe.errors import ConfigError

DEFAULT_COMPRESSION = "zstd:3"
ENROOT_OPTIONS_VAR = "ENROOT_SQUASH_OPTIONS"
ENROOT_DEFAULT_OPTIONS = ("-comp", "lzo", "-noD")

# algorithm -> (lowest level, highest level) accepted by mksquashfs -Xcompression-level.
LEVELS: dict[str, tuple[int, int]] = {"zstd": (1, 22), "gzip": (1, 9), "lzo": (1, 9)}
ALGORITHMS = ("zstd", "gzip", "lzo", "lz4", "xz")
SPELLING = re.compile(r"^(?P<algorithm>[a-z0-9]+)(?::(?P<setting>[a-z0-9]+))?(?P<nod>-nod)?$")
SPELLING_HELP = "zstd[:1-22], gzip[:1-9], lzo[:1-9], lz4[:hc] or xz, optionally followed by -nod (e.g. zstd:3, lzo-nod)"


@dataclass(frozen=True)
class Compression:
    """One compression setting of mksquashfs."""

    algorithm: str
    level: int | None = None
    high_compression: bool = False  # lz4 -Xhc
    uncompressed_data: bool = False  # -noD

    @classmethod
    def parse(cls, text: str) -> Compression:
        """`zstd:3` -> Compression; ConfigError naming the valid spellings otherwise."""
        spelled = text.strip().lower()
        match = SPELLING.match(spelled)
        if match is None:
            raise ConfigError(f"compression '{text}' is not valid", fix=f"write {SPELLING_HELP}")
        algorithm, setting = match["algorithm"], match["setting"]
        if algorithm not in ALGORITHMS:
            raise ConfigError(
                f"compression '{text}': unknown algorithm '{algorithm}': {did_you_mean(algorithm, ALGORITHMS)}",
                fix=f"write {SPELLING_HELP}",
            )
        level, high = None, False
        if setting is not None:
            if algorithm in LEVELS:
                low, top = LEVELS[algorithm]
                if not setting.isdigit() or not low <= int(setting) <= top:
                    raise ConfigError(f"compression '{text}': {algorithm} levels are {low}-{top}",
                                      fix=f"e.g. {algorithm}:{low}")
                level = int(setting)
            elif algorithm == "lz4" and setting == "hc":
                high = True
            else:
                allowed = "hc" if algorithm == "lz4" else "no setting"
                raise ConfigError(f"compression '{text}': {algorithm} takes {allowed}",
                                  fix=f"write {SPELLING_HELP}")
        return cls(algorithm, level, high, match["nod"] is not None)

    @classmethod
    def from_options(cls, options: Sequence[str]) -> Compression | None:
        """The setting that `options` spell, or None when they are more than a compression setting."""
        rest = list(options)
        if rest[:1] != ["-comp"] or len(rest) < 2:
            return None
        algorithm, rest = rest[1], rest[2:]
        level, high, no_data = None, False, False
        while rest:
            if rest[:1] == ["-Xcompression-level"] and len(rest) > 1 and rest[1].isdigit():
                level, rest = int(rest[1]), rest[2:]
            elif rest[0] == "-Xhc":
                high, rest = True, rest[1:]
            elif rest[0] == "-noD":
                no_data, rest = True, rest[1:]
            else:
                return None
        candidate = cls(algorithm, level, high, no_data)
        try:  # only what our spelling can say, within the valid ranges
            return cls.parse(candidate.spelling)
        except ConfigError:
            return None

    @property
    def spelling(self) -> str:
        setting = f":{self.level}" if self.level is not None else (":hc" if self.high_compression else "")
        return f"{self.algorithm}{setting}{'-nod' if self.uncompressed_data else ''}"

    def mksquashfs_options(self) -> tuple[str, ...]:
        options = ["-comp", self.algorithm]
        if self.level is not None:
            options += ["-Xcompression-level", str(self.level)]
        if self.high_compression:
            options.append("-Xhc")
        if self.uncompressed_data:
            options.append("-noD")
        return tuple(options)


@dataclass(frozen=True)
class ChosenCompression:
    """The options a squash uses, how to call them, and where they came from."""

    spelling: str  # `zstd:3`, or the raw ENROOT_SQUASH_OPTIONS when our spelling cannot say it
    options: tuple[str, ...]
    source: str  # "--compression", ENROOT_OPTIONS_VAR or "default"
    overridden_env: str | None = None  # ENROOT_SQUASH_OPTIONS that --compression replaced

    @property
    def from_environment(self) -> bool:
        return self.source == ENROOT_OPTIONS_VAR

    def describe(self) -> str:
        """One line for people: what is used and why."""
        if self.from_environment:
            return f"compression {self.spelling} ({ENROOT_OPTIONS_VAR}={shlex.join(self.options)} from the environment)"
        text = f"compression {self.spelling} ({self.source}: {shlex.join(self.options)})"
        if self.overridden_env is not None:
            text += f"; --compression overrides {ENROOT_OPTIONS_VAR}={self.overridden_env}"
        return text


def choose_compression(flag: str | None, environ: Mapping[str, str]) -> ChosenCompression:
    """`--compression` if given, else ENROOT_SQUASH_OPTIONS if set (non-empty), else the default."""
    env_value = environ.get(ENROOT_OPTIONS_VAR, "").strip()
    if flag:
        chosen = Compression.parse(flag)
        return ChosenCompression(chosen.spelling, chosen.mksquashfs_options(), "--compression",
                                 overridden_env=env_value or None)
    if env_value:
        try:
            options = tuple(shlex.split(env_value))
        except ValueError as exc:
            raise ConfigError(f"{ENROOT_OPTIONS_VAR}='{env_value}' cannot be split into options: {exc}",
                              fix=f"fix the quoting, or unset {ENROOT_OPTIONS_VAR} and pass --compression") from None
        known = Compression.from_options(options)
        return ChosenCompression(known.spelling if known else shlex.join(options), options, ENROOT_OPTIONS_VAR)
    default = Compression.parse(DEFAULT_COMPRESSION)
    return ChosenCompression(default.spelling, default.mksquashfs_options(), "default")
