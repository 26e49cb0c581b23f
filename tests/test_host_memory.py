"""kvdiv.host_memory: with the setting, a 20 MiB tensor comes from the heap and freed tensors' pages stay in the process
for the next ones (a trim threshold below 200 MiB would return them); without it glibc maps the first on its own.
Each case runs in its own process (the setting is process-wide)."""

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's"
)

#: one 20 MiB tensor (is it inside the brk heap?), then ten alive at once and freed: the resident bytes they leave
PROBE = r"""
import ctypes, json, os, sys
if sys.argv[1] == "retain":
    from kvdiv.host_memory import retain_freed_memory
    ok = retain_freed_memory()
else:
    ok = None
import torch

libc = ctypes.CDLL("libc.so.6")
libc.sbrk.restype = ctypes.c_void_p
rss = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
first = torch.empty(5 << 20).fill_(1.0)
in_heap = first.data_ptr() < libc.sbrk(0)
del first
before = rss()
tensors = [torch.empty(5 << 20).fill_(1.0) for _ in range(10)]
while tensors:  # the newest first, each onto the heap's top
    tensors.pop()
print(json.dumps({"ok": ok, "in_heap": in_heap, "kept_mb": (rss() - before) / 2**20}))
"""


def probe(variant: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, variant], capture_output=True, text=True, check=True, env={**os.environ}
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_large_tensors_come_from_the_heap_and_freed_pages_stay_for_reuse():
    default, retain = probe("default"), probe("retain")
    assert retain["ok"] is True and default["ok"] is None
    assert retain["in_heap"] and not default["in_heap"]  # glibc maps a first 20 MiB request on its own
    assert retain["kept_mb"] > 150  # the ten tensors' 200 MiB stay resident (a trim threshold below it returns them)
