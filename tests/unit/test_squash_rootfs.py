"""The rootfs files enroot writes on import (/etc/environment, /etc/fstab, /etc/rc, /etc/rc.local),
checked as text and by running the rendered /etc/rc with real bash and sh."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from clusterprobe.rootfs import ImageConfig, bash_quote, render_environment, render_fstab, render_rc, rootfs_files

TRICKY_WORDS = ["plain", "a b", "it's", "'", "", 'say "hi"', "$HOME", "back\\slash", "x\ny", "tab\there",
                "esc\x1b", "é", "*", "a'b'c"]


def test_bash_quote_matches_bash_at_q() -> None:
    for word in TRICKY_WORDS:
        expected = subprocess.run(["bash", "-c", 'printf %s "${1@Q}"', "_", word], capture_output=True,
                                  text=True, check=True, env={**os.environ, "LC_ALL": "C.UTF-8"}).stdout
        assert bash_quote(word) == expected, word


def test_inspect_config_becomes_the_three_files() -> None:
    config = ImageConfig.from_inspect({"Config": {
        "Env": ["PATH=/opt/venv/bin:/usr/bin", "QUOTED=it's \"x\""],
        "Cmd": ["python", "/opt/clusterprobe/versions.py"],
        "Entrypoint": None,
        "WorkingDir": "/work",
        "Volumes": {"/scratch": {}, "/data": {}},
        "Labels": {"z.last": "2", "a.first": "one two"},
    }})
    assert render_environment(config) == "PATH=/opt/venv/bin:/usr/bin\nQUOTED=it's \"x\"\n"
    assert render_fstab(config) == (
        "${ENROOT_ROOTFS}/data /data none x-create=dir,bind,rw,nosuid,nodev\n"
        "${ENROOT_ROOTFS}/scratch /scratch none x-create=dir,bind,rw,nosuid,nodev\n"
    )
    assert render_rc(config) == (
        "# a.first one two\n"
        "# z.last 2\n"
        "\n"
        'mkdir -p "/work" 2> /dev/null\n'
        'cd "/work" && unset OLDPWD || exit 1\n'
        "\n"
        "if [ -s /etc/rc.local ]; then\n"
        "    . /etc/rc.local\n"
        "fi\n"
        "\n"
        "if [ $# -gt 0 ]; then\n"
        '    exec  "$@"\n'
        "else\n"
        "    exec  'python' '/opt/clusterprobe/versions.py'\n"
        "fi\n"
    )
    files = rootfs_files(config)
    assert list(files) == ["etc/fstab", "etc/environment", "etc/rc", "etc/rc.local"]
    assert files["etc/rc.local"].startswith(b"# This file is sourced by /etc/rc")


def test_empty_config_runs_a_shell_in_the_root() -> None:
    config = ImageConfig.from_inspect({"Config": {"Env": None, "Cmd": None, "Labels": None}})
    assert render_environment(config) == ""
    assert render_fstab(config) == ""
    rc = render_rc(config)
    assert rc.startswith('mkdir -p "/" 2> /dev/null\ncd "/" && unset OLDPWD')
    assert "    exec  '/bin/sh'\n" in rc


def _run_rc(rc: str, tmp_path: Path, shell: str, *args: str) -> str:
    script = tmp_path / "rc"
    script.write_text(rc)
    proc = subprocess.run([shell, str(script), *args], capture_output=True, text=True, check=True, cwd="/")
    return proc.stdout


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_rendered_rc_cds_and_execs_entrypoint_with_cmd_or_arguments(tmp_path: Path, shell: str) -> None:
    """Whatever the words hold, the program receives exactly them, in the working directory."""
    workdir = tmp_path / "work dir" / "created"  # missing: rc creates it, as enroot's does
    printer = ["/usr/bin/printf", "[%s]\\n"]
    # Words with control characters come out as $'...', which only bash reads (next test).
    cmd = [w for w in TRICKY_WORDS if w.isprintable()] + ["$(pwd)"]
    rc = render_rc(ImageConfig(entrypoint=tuple(printer), cmd=tuple(cmd), working_dir=str(workdir)))
    assert _run_rc(rc, tmp_path, shell) == "".join(f"[{w}]\n" for w in cmd)
    assert workdir.is_dir()
    assert _run_rc(rc, tmp_path, shell, "given", "a r g") == "[given]\n[a r g]\n"
    pwd = render_rc(ImageConfig(entrypoint=("/bin/sh", "-c"), cmd=("pwd",), working_dir=str(workdir)))
    assert _run_rc(pwd, tmp_path, shell).strip() == str(workdir)


def test_words_with_control_characters_reach_the_program_intact(tmp_path: Path) -> None:
    words = ("x\ty", "esc\x1bend", "back\\slash")
    rc = render_rc(ImageConfig(entrypoint=("/usr/bin/printf", "[%s]"), cmd=words, working_dir=str(tmp_path)))
    assert _run_rc(rc, tmp_path, "bash") == "".join(f"[{w}]" for w in words)
