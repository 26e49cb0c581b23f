"""Freed host buffers kept for reuse instead of unmapped: a process-wide malloc setting for the workflow's jobs.

glibc's malloc maps a request above its mmap threshold with pages of its own and unmaps them on free, and it
returns freed memory at its heap's top to the system once that exceeds its trim threshold; both thresholds start at
128 KiB and rise (to at most 32 and 64 MiB) only as large blocks are freed. A prefill frees and allocates tens of MB
per layer, so the heap is trimmed and regrown over and over, and each regrowth costs the kernel a fault and a zeroed
page per 4 KiB (a 4096-token SmolLM2 prefill with four actions: 1.5 M faults, 3.2 s of system time).
:func:`retain_freed_memory` fixes the mmap threshold at its largest (:data:`MMAP_THRESHOLD`) and keeps up to
:data:`TRIM_THRESHOLD` of freed memory at the heap's top, so a layer reuses the pages the previous layer freed.
Requests above 32 MiB are mapped as before (serving them from the heap too fragments it: a prefill's peak RSS rose
23 %). The arithmetic is the same, so values are unchanged (benchmarks/host_memory.md).

It changes the whole process, so the workflow's job scripts call it (workflow_scripts/trajectories.py), not the
library: :mod:`kvdiv.compare` in a user's own process leaves their allocator alone. Other C libraries (musl, macOS)
are left as they are.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

#: mallopt's parameters (glibc malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: requests above it are mapped on their own; glibc's largest (32 MiB on 64-bit)
MMAP_THRESHOLD = 32 << 20
#: freed bytes kept at the heap's top before malloc returns them to the system
TRIM_THRESHOLD = 1 << 30


@functools.lru_cache(maxsize=1)
def retain_freed_memory() -> bool:
    """Set this process's glibc malloc to serve requests up to 32 MiB from its heap and keep freed memory for reuse;
    True if both settings took, False where the C library has no ``mallopt`` (not glibc) or refused them."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "retain_freed_memory"]
