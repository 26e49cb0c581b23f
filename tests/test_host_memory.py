"""kvdiv.host_memory: with the setting, a 20 MiB tensor comes from the heap and freed tensors' pages stay in the process
for the next ones until release_freed_memory(); without it glibc maps the first on its own.
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

#: one 20 MiB tensor (is it inside the brk heap?), then ten alive at once and freed: the resident bytes they leave,
#: and those left after release_freed_memory()
PROBE = r"""
import json, os, sys
from kvdiv.host_memory import release_freed_memory, retain_freed_memory
ok = retain_freed_memory() if sys.argv[1] == "retain" else None
import torch

def heap():
    for line in open("/proc/self/maps"):
        if line.rstrip().endswith("[heap]"):
            start, end = line.split()[0].split("-")
            return int(start, 16), int(end, 16)
    return 0, 0

rss = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
first = torch.empty(5 << 20).fill_(1.0)
start, end = heap()
in_heap = start <= first.data_ptr() < end
del first
before = rss()
tensors = [torch.empty(5 << 20).fill_(1.0) for _ in range(10)]
while tensors:  # the newest first, each onto the heap's top
    tensors.pop()
kept = rss() - before
released = release_freed_memory()
print(json.dumps({"ok": ok, "in_heap": in_heap, "kept_mb": kept / 2**20, "released": released,
                  "after_release_mb": (rss() - before) / 2**20}))
"""

#: what would change the allocator under the probe: another malloc, glibc's own settings
ALLOCATOR_ENVIRONMENT = ("LD_PRELOAD", "GLIBC_TUNABLES")


def probe(variant: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ALLOCATOR_ENVIRONMENT and not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", PROBE, variant], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_large_tensors_come_from_the_heap_and_freed_pages_stay_until_released():
    default, retain = probe("default"), probe("retain")
    assert retain["ok"] is True and default["ok"] is None
    assert retain["in_heap"] and not default["in_heap"]  # glibc maps a first 20 MiB request on its own
    assert retain["kept_mb"] > 150  # the ten tensors' 200 MiB stay resident (a trim threshold below it returns them)
    assert retain["released"] and retain["after_release_mb"] < 50  # malloc_trim hands them back
