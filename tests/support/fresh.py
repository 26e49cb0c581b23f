"""Code run in a fresh interpreter (import order, registries, process-wide settings): its last line of output."""

from __future__ import annotations

import subprocess
import sys


def last_line(code: str) -> str:
    """Run ``code`` with this interpreter in a new process; the last line it printed (its stderr's end if it failed)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]
