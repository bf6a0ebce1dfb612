"""What people read (tables, progress on stderr) and what programs read (JSON on stdout)."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TextIO


def render_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A plain aligned text table; numbers right-aligned, the rest left-aligned."""
    cells = [[_cell(row.get(col)) for col in columns] for row in rows]
    widths = [max([len(col), *(len(r[i]) for r in cells)]) for i, col in enumerate(columns)]
    numeric = [
        all(isinstance(row.get(col), (int, float)) for row in rows if row.get(col) is not None)
        for col in columns
    ]

    def fmt(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    lines = [fmt(list(columns)), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def emit(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    *,
    as_json: bool,
    stream: TextIO | None = None,
) -> None:
    """Print rows as a table for people or as a JSON list for programs."""
    out = stream or sys.stdout
    if as_json:
        json.dump(list(rows), out, indent=2, sort_keys=True, default=str)
        out.write("\n")
    else:
        out.write(render_table(rows, columns) + "\n")
    out.flush()


def progress(message: str) -> None:
    """One line of progress on stderr, so stdout stays clean for tables and JSON."""
    print(f"==> {message}", file=sys.stderr, flush=True)


@contextmanager
def stage(message: str) -> Iterator[None]:
    """Progress for a step with its duration: '==> squash cpu ... done (4.2 s)'."""
    progress(f"{message} ...")
    start = time.monotonic()
    yield
    progress(f"{message}: done ({time.monotonic() - start:.1f} s)")


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([kmgt]?)(?:i?b)?$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_bytes(text: str, *, fractions: bool = False) -> int | None:
    """'64K', '1M', '40G', '40GiB', '40GB', '1048576' -> bytes (units are powers of 1024);
    None when `text` is not such a size. '1.5T' only with `fractions`."""
    match = _SIZE.match(text)
    if not match or ("." in match[1] and not fractions):
        return None
    return int(float(match[1]) * _UNITS[match[2].lower()])
