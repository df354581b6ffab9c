"""`trm data push | list | show | rm`: data sets (folders of logs) on the server, from a terminal.

`push` packs a folder client-side (a tar.gz of its contents, links and hidden files left out),
streams it with its sha256, and prints what the server will read from it: the sources a train
spec can name (`{"dataset": NAME}`), rows, families, malformed lines.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from app.cli.runs import _fail, add_url
from app.client import ApiCallError, Client
from core.card import printable
from core.dataset_pack import pack


def register(sub: argparse._SubParsersAction) -> None:
    data = sub.add_parser("data", help="data sets: push a folder of logs, list, show, remove")
    verbs = data.add_subparsers(dest="data_verb", required=True, metavar="VERB")
    p = verbs.add_parser(
        "push",
        help="upload a folder of logs (or a .jsonl, .tar, .tar.gz or .zip file) as a data set",
        description="Packs the folder at PATH (links and hidden files left out), or takes the "
        "file, uploads it with its sha256 and prints what a train spec reads from it; name it "
        'in a source as {"dataset": NAME}.',
    )
    p.add_argument("path", type=Path, help="the folder or file to upload")
    p.add_argument(
        "--name", required=True, help="the data set's name: a-z, 0-9, '.', '_', '-' (max 64)"
    )
    p.add_argument(
        "--replace", action="store_true", help="replace a data set of that name (default: off)"
    )
    p.add_argument("--json", action="store_true", help="print the API's JSON (default: text)")
    add_url(p)
    p.set_defaults(func=cmd_push)
    p = verbs.add_parser("list", help="the data sets on the server")
    p.add_argument("--json", action="store_true", help="print the API's JSON (default: text)")
    add_url(p)
    p.set_defaults(func=cmd_list)
    p = verbs.add_parser("show", help="what a train run would read from a data set")
    p.add_argument("name", help="the data set's name")
    p.add_argument("--json", action="store_true", help="print the API's JSON (default: text)")
    add_url(p)
    p.set_defaults(func=cmd_show)
    p = verbs.add_parser("rm", help="delete a data set (refused while a run reads it)")
    p.add_argument("name", help="the data set's name")
    add_url(p)
    p.set_defaults(func=cmd_rm)


def cmd_push(args: argparse.Namespace) -> int:
    client = Client(args.url)
    with tempfile.TemporaryDirectory(prefix="trm-push-") as scratch:
        try:
            packed = pack(args.path, Path(scratch))
        except (OSError, ValueError) as exc:
            return _fail(exc)
        for rel in packed.left_out:
            print(printable(f"left out (a link or hidden): {rel}"))
        try:
            answer = client.push_dataset(packed, args.name, args.replace)
        except (ApiCallError, OSError) as exc:
            return _fail(exc)
    if args.json:
        print(json.dumps(answer, indent=2))
        return 0
    meta = answer["dataset"]
    verb = "replaced" if answer["replaced"] else "pushed"
    print(printable(f"{verb} {meta['name']}: {meta['bytes']} bytes ({meta['format']})"))
    print(f"sha256 {meta['sha256']} (checked by the server)")
    print(render_show(answer["show"]), end="")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    try:
        page = Client(args.url).datasets()
    except ApiCallError as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(page, indent=2))
        return 0
    print(f"{'NAME':24}  {'FILES':>6}  {'UNPACKED':>12}  {'SHA256':12}  {'CREATED':19}  BY")
    for d in page["datasets"]:
        line = (
            f"{d['name']:24}  {d['files']:6}  {d['unpacked_bytes']:12}  {d['sha256'][:12]}  "
            f"{d['created_at'][:19]}  {d['created_by']}"
        )
        print(printable(line))
    print(printable(f"(under {page['data_dir']}/datasets on the API host)"))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    try:
        view = Client(args.url).dataset(args.name)
    except ApiCallError as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(view, indent=2))
        return 0
    print(render_show(view), end="")
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    try:
        meta = Client(args.url).delete_dataset(args.name)
    except ApiCallError as exc:
        return _fail(exc)
    print(printable(f"deleted {meta['name']} ({meta['files']} files)"))
    return 0


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "none named"


def render_show(view: dict[str, Any]) -> str:
    """What `GET /datasets/{name}` says, as text: every line through `printable` (file names
    and families come from the uploader)."""
    meta = view["dataset"]
    lines = [
        f"data set {meta['name']}: {meta['files']} files, {meta['unpacked_bytes']} bytes, "
        f"created {meta['created_at'][:19]} by {meta['created_by']}",
        f"rows {view['rows']} in {view['files_total']} file(s) a source reads",
    ]
    for f in view["files"]:
        bad = f"  {f['malformed']} malformed" if f["malformed"] else ""
        part = "" if f["read"] == "all" else f"  (read {f['read']})"
        lines.append(f"  {f['path']}  {f['rows']} rows{bad}{part}")
    if view["files_total"] > len(view["files"]):
        lines.append(f"  ... {view['files_total'] - len(view['files'])} more")
    lines.append(f"families: {_counts(view['families'])}")
    lines.append(f"worlds: {_counts(view['worlds'])}")
    if view["malformed_total"]:
        shown = ", ".join(f"{m['file']}:{m['line']} {m['reason']}" for m in view["malformed"])
        lines.append(f"malformed lines ({view['malformed_total']}): {shown}")
    if view["unread"]:
        lines.append(f"not read by any source: {', '.join(view['unread'][:10])}")
    if view["sources"]:
        lines.append("a train spec's corpus.sources can name:")
        for s in view["sources"]:
            source = {k: s[k] for k in ("type", "name", "dataset")}
            if s["path"]:
                source["path"] = s["path"]
            lines.append(f"  {json.dumps(source)}")
    if view.get("note"):
        lines.append(f"note: {view['note']}")
    return "".join(printable(line) + "\n" for line in lines)
