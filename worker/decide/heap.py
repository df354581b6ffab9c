"""The C heap of a process that decides (the decision process, `bench/decide.py`): glibc's malloc
told to keep the memory a decision's arrays use rather than hand it back to the system after
each call.

A trm decision of 64 routerBench rows allocates and frees arrays of a few hundred kB to a few MB
(the raw and scaled matrices, the forward's activations, numpy's and torch's). With glibc's
defaults (an allocation from 128 kB mapped on its own, raised as such blocks are freed, and the
heap's free top given back past twice that) those came and went each call: 700-1,000 page
faults a call, zero-filled by the kernel, a tenth to a fifth of the call's CPU time. Up to
`MAP_FROM` an allocation now comes from the heap, and the heap keeps up to `TRIM_FROM` free at
its top (the bounds glibc's own thresholds rise to, held from the start): no page faults a call
(a call of 64 rows of 120-odd candidates has arrays of 4 MB), at most `TRIM_FROM` more resident
memory.

Elsewhere than glibc (no `mallopt`) nothing is changed.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MAP_FROM = 32 << 20  # bytes from which an allocation is mapped on its own
TRIM_FROM = 64 << 20  # free bytes at the heap's top from which they are given back


def keep_heap() -> bool:
    """glibc's thresholds set as above; False where the C library has no `mallopt` (or refused)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # pragma: no cover - depends on the C library
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MAP_FROM)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_FROM))
