from __future__ import annotations

import pytest

from clusterprobe.errors import CommandError, ToolNotFoundError
from clusterprobe.runner import Runner, display_command


def test_display_quotes_every_word() -> None:
    assert display_command(["echo", "a b", "$HOME"], {"X": "1 2"}) == "X='1 2' echo 'a b' '$HOME'"


def test_dry_run_prints_and_does_not_run(tmp_path) -> None:
    lines: list[str] = []
    marker = tmp_path / "made"
    result = Runner(dry_run=True, echo=lines.append).run(["touch", str(marker)])
    assert result is None and not marker.exists()
    assert lines == [f"+ touch {marker}"]


def test_read_only_commands_run_in_dry_run() -> None:
    assert Runner(dry_run=True, echo=lambda _: None).output(["echo", "hi"]) == "hi\n"


def test_missing_tool_says_how_to_install() -> None:
    with pytest.raises(ToolNotFoundError, match="'mksquashfs-nope' was not found on PATH"):
        Runner(echo=lambda _: None).run(["mksquashfs-nope"])
    with pytest.raises(ToolNotFoundError) as err:
        from clusterprobe.runner import require_tool

        require_tool("definitely-not-installed-tool")
    assert err.value.exit_code == 3


def test_failure_carries_output_tail() -> None:
    with pytest.raises(CommandError, match="exited with code 3:\nboom"):
        Runner(echo=lambda _: None).run(["sh", "-c", "echo boom >&2; exit 3"], capture=True)


def test_secret_input_is_never_echoed() -> None:
    lines: list[str] = []
    proc = Runner(echo=lines.append).run(["cat"], secret_input="s3cr3t", capture=True)
    assert proc is not None and proc.stdout == "s3cr3t"
    assert all("s3cr3t" not in line for line in lines)
