"""A request body streamed to a file as it arrives, bounded and hashed on the way: what the
artifact uploads (`PUT /runs/{id}/artifacts/...`) and the data set uploads (`PUT /datasets/...`)
both do before they check the sha256 their client sent."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import BinaryIO

from fastapi import Request


async def receive_body(
    request: Request, fh: BinaryIO, check: Callable[[int], None]
) -> tuple[str, int]:
    """Write the body to `fh` chunk by chunk; `check(size)` raises as soon as the bytes so far
    are over a bound, before they are written. The body's sha256 (hex) and size."""
    digest, size = hashlib.sha256(), 0
    async for chunk in request.stream():
        size += len(chunk)
        check(size)
        digest.update(chunk)
        fh.write(chunk)
    return digest.hexdigest(), size
