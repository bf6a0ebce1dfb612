"""The files `enroot import dockerd://IMAGE` writes into a rootfs, rendered from the image config.

Mirrors enroot's `docker::configure` (src/docker.sh in NVIDIA/enroot):
  /etc/environment  one line per entry of the image Env, as is
  /etc/fstab        one bind mount per image Volume (created at start, `x-create=dir`)
  /etc/rc           the image labels as comments, then: cd to the WorkingDir, source
                    /etc/rc.local, exec entrypoint + (arguments or cmd), words quoted like bash `@Q`
  /etc/rc.local     an empty hook with enroot's two comment lines (it replaces the image's own)
When the image has neither entrypoint nor cmd, enroot runs /bin/sh, and so does our /etc/rc.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ENVIRONMENT = "etc/environment"
FSTAB = "etc/fstab"
RC = "etc/rc"
RC_LOCAL = "etc/rc.local"
ROOTFS_FILES = (FSTAB, ENVIRONMENT, RC, RC_LOCAL)  # the order enroot writes them in

RC_LOCAL_TEXT = (
    "# This file is sourced by /etc/rc when the container starts.\n"
    "# It can be used to manipulate the entrypoint or the command of the container.\n"
)

# Characters bash writes as \X inside $'...' (bash's ansic_quote).
_ANSI_C_ESCAPES = {"\a": "a", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t", "\v": "v",
                   "\x1b": "E", "\\": "\\", "'": "'"}


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an image's config that enroot turns into files."""

    env: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    working_dir: str = ""
    volumes: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_inspect(cls, attrs: Mapping[str, Any]) -> ImageConfig:
        """From `docker image inspect` output (the SDK's Image.attrs)."""
        config = attrs.get("Config") or {}
        return cls(
            env=tuple(config.get("Env") or ()),
            entrypoint=tuple(config.get("Entrypoint") or ()),
            cmd=tuple(config.get("Cmd") or ()),
            working_dir=config.get("WorkingDir") or "",
            volumes=tuple(config.get("Volumes") or {}),
            labels=dict(config.get("Labels") or {}),
        )


def bash_quote(word: str) -> str:
    """`word` quoted as bash 5 `${word@Q}` does: '...' , or $'...' when it holds control characters."""
    if any(ord(c) < 32 or ord(c) == 127 for c in word):
        body = "".join(
            "\\" + _ANSI_C_ESCAPES[c] if c in _ANSI_C_ESCAPES
            else f"\\{ord(c):03o}" if ord(c) < 32 or ord(c) == 127
            else c
            for c in word
        )
        return f"$'{body}'"
    if word == "'":
        return "\\'"
    return "'" + word.replace("'", "'\\''") + "'"


def _lines(words: Sequence[str]) -> list[str]:
    # enroot reads jq's line output back with `readarray`: a word holding a newline becomes two.
    return "\n".join(words).split("\n") if words else []


def render_environment(config: ImageConfig) -> str:
    return "".join(f"{entry}\n" for entry in config.env)


def render_fstab(config: ImageConfig) -> str:
    return "".join(f"${{ENROOT_ROOTFS}}{v} {v} none x-create=dir,bind,rw,nosuid,nodev\n"
                   for v in sorted(config.volumes))


def render_rc(config: ImageConfig) -> str:
    entrypoint, cmd = _lines(config.entrypoint), _lines(config.cmd)
    if not entrypoint and not cmd:
        cmd = ["/bin/sh"]
    ep = " ".join(bash_quote(w) for w in entrypoint)
    args = " ".join(bash_quote(w) for w in cmd)
    workdir = config.working_dir or "/"
    labels = "".join(f"# {key} {value}\n" for key, value in sorted(config.labels.items()))
    return (
        (labels + "\n" if labels else "")
        + f'mkdir -p "{workdir}" 2> /dev/null\n'
        f'cd "{workdir}" && unset OLDPWD || exit 1\n'
        "\n"
        "if [ -s /etc/rc.local ]; then\n"
        "    . /etc/rc.local\n"
        "fi\n"
        "\n"
        "if [ $# -gt 0 ]; then\n"
        f'    exec {ep} "$@"\n'
        "else\n"
        f"    exec {ep} {args}\n"
        "fi\n"
    )


def rootfs_files(config: ImageConfig) -> dict[str, bytes]:
    """Path inside the rootfs (no leading slash) -> content, for each of ROOTFS_FILES."""
    texts = {FSTAB: render_fstab(config), ENVIRONMENT: render_environment(config), RC: render_rc(config),
             RC_LOCAL: RC_LOCAL_TEXT}
    return {name: texts[name].encode() for name in ROOTFS_FILES}
