"""Freed host memory kept for reuse: a process-wide malloc setting for the workflow's trajectory jobs.

glibc hands memory above its mmap and trim thresholds (128 KiB at first) back to the system on free, so a prefill that
frees and allocates tens of MB per layer has the kernel fault in zeroed pages again and again (1.5 M faults in a
4096-token SmolLM2 prefill with four actions). :func:`retain_freed_memory` serves requests up to 32 MiB from the heap
and keeps up to 1 GiB freed; :func:`release_freed_memory` hands it back after a batch's prefills. Same arithmetic,
same values (benchmarks/host_memory.md). Only the job script sets it (workflow_scripts/trajectories.py): the library
in a user's process leaves their allocator alone. Not glibc: nothing happens.
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
