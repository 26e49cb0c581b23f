"""Freed host buffers kept for reuse instead of handed back: a process-wide malloc setting for the workflow's jobs.

glibc's malloc maps a request above its mmap threshold with pages of its own and unmaps them on free, and it
returns freed memory at its heap's top to the system once that exceeds its trim threshold; both thresholds start at
128 KiB and adjust themselves (up to 32 and 64 MiB) only as large blocks are freed. A prefill frees and allocates
tens of MB per layer, so the heap is trimmed and regrown over and over, and each regrowth costs the kernel a fault
and a zeroed page per 4 KiB (a 4096-token SmolLM2 prefill with four actions: 1.5 M faults, 3.2 s of system time).
:func:`retain_freed_memory` fixes the mmap threshold at :data:`MMAP_THRESHOLD` (32 MiB, the cap of glibc's own
adjustment) and keeps up to :data:`TRIM_THRESHOLD` of freed memory at the heap's top, so a layer reuses the pages the
previous layer freed; :func:`release_freed_memory` hands it back once a batch's prefills are done
(:mod:`kvdiv.trajectories.job`), so it is not held through the decode. Requests above 32 MiB are mapped as before
(serving them from the heap too fragments it: a prefill's peak RSS rose 23 %). The arithmetic is the same, so values
are unchanged (benchmarks/host_memory.md).

:func:`retain_freed_memory` changes the whole process, so the workflow's job script calls it
(workflow_scripts/trajectories.py), not the library: :mod:`kvdiv.compare` in a user's own process leaves their
allocator's settings alone. Other C libraries (musl, macOS) are left as they are.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any

#: mallopt's parameters (glibc malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: requests above it are mapped on their own (the cap of glibc's own adjustment on 64-bit)
MMAP_THRESHOLD = 32 << 20
#: freed bytes kept at the heap's top before malloc returns them to the system
TRIM_THRESHOLD = 1 << 30


@functools.lru_cache(maxsize=1)
def _glibc() -> Any:
    """This process's C library if it is glibc (has ``mallopt`` and ``malloc_trim``), else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        mallopt, trim = libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return libc


@functools.lru_cache(maxsize=1)
def retain_freed_memory() -> bool:
    """Set this process's glibc malloc to serve requests up to 32 MiB from its heap and keep freed memory for reuse;
    True if both settings took, False where the C library is not glibc or refused them."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def release_freed_memory() -> bool:
    """Hand the heap's free memory back to the system now (glibc's ``malloc_trim(0)``); True if some was released,
    False if none was or the C library is not glibc."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))


__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "release_freed_memory", "retain_freed_memory"]
