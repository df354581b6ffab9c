"""Writing the corpus: JSONL encoding, content hashes, and atomic file replacement.

Every file goes to a temporary name in the same folder and is renamed into place, so a reader
never sees a half-written file; the manifest is removed first and written last, so a manifest on
disk always describes the files beside it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from core.rundir import MANIFEST, write_bytes_atomic

# Exported files, in the order they enter the corpus hash.
FILE_KEYS = ("train", "val", "anchor", "critic", "messages", "messages_val")

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def encode_jsonl(rows: Iterable[dict[str, Any]]) -> bytes:
    return "".join([_dumps(row) + "\n" for row in rows]).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def corpus_hash(digests: dict[str, str]) -> str:
    """Hash over the exported content only (names and bytes): equal corpora hash equal,
    wherever their sources lived."""
    joined = "".join(f"{key}.jsonl\n{digests[key]}\n" for key in FILE_KEYS)
    return sha256_hex(joined.encode())


def already_there(out_dir: Path, expected_hash: str, digests: dict[str, str]) -> bool:
    """True when out_dir holds this exact corpus (same hash, files intact): it is reused."""
    manifest_path = out_dir / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("corpus_hash") != expected_hash:
        return False
    for key in FILE_KEYS:
        path = out_dir / f"{key}.jsonl"
        if not path.is_file() or sha256_hex(path.read_bytes()) != digests[key]:
            return False
    return True


def write_corpus(out_dir: Path, contents: dict[str, bytes], manifest: dict[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST).unlink(missing_ok=True)
    for key in FILE_KEYS:
        write_bytes_atomic(out_dir / f"{key}.jsonl", contents[key])
    write_manifest(out_dir, manifest)


def write_manifest(out_dir: Path, manifest: dict[str, Any]) -> None:
    text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    write_bytes_atomic(out_dir / MANIFEST, text.encode())
