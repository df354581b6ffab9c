"""`trm demo`: the main job (the routerBench demo) on the embedded default.

Starts the service like `trm up`, trains a `trm` controller on the routerBench route data (and,
with `--qlora`, a SmolLM2 adapter), benches it against the untrained baseline on the fixed anchor
worlds, prints the scorecard (the router against the baseline, majority and the gbdt reference)
and the card, and leaves the service up for the dashboard.

`--qlora` is sized to finish in minutes on a 2-core CPU (specs/train-routerbench-qlora.json: 30
steps of 8 rows, the rows' own length of ~410 tokens, a val loss on 16 rows, 48 train rows and
4 rollout episodes per anchor world scored besides every anchor row; its bench scores the same).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from app.cli.runs import load_spec
from app.cli.server import LocalStack, export_line, serve_until_stopped, stopped_on_exit
from app.client import ApiCallError, Client
from core.card import count_text, eta_text

SPECS = Path(__file__).resolve().parents[2] / "specs"
HEADLINE = ("train_score", "anchor_score", "failure_rate", "recovery_rate", "generalization_gap")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the routerBench demo: train, bench, print the scorecard")
    p.add_argument(
        "--qlora",
        action="store_true",
        help="also train a SmolLM2 QLoRA adapter and bench it (default: off; about 11 more "
        "minutes on a 2-core CPU)",
    )
    p.add_argument(
        "--exit",
        action="store_true",
        help="stop the service when done (default: keep it up for the dashboard until Ctrl-C)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="start the service and run the train spec as a dry run only: no training, no bench "
        "(default: off)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=None,
        help="the API's port; in use: refused (default: TRM_API_PORT or 8000; in use: a free "
        "one, printed)",
    )
    p.set_defaults(func=cmd_demo)


def progress_line(data: dict[str, Any]) -> str:
    """The card's step/loss line, one line per print (what `trm watch` redraws in place)."""
    loss = data.get("loss")
    return (
        f"   {data.get('phase') or data.get('status') or '-':16} "
        + count_text(data.get("step"), data.get("total_steps"), data.get("unit"))
        + (f"  loss {loss:.4f}" if isinstance(loss, int | float) else "")
        + f"  {float(data.get('percent') or 0):5.1f}%  ETA {eta_text(data.get('eta_s'))}"
    )


def follow(client: Client, run: dict[str, Any], label: str, every_s: float = 5.0) -> dict[str, Any]:
    """Print each stage as it starts, a progress line at most every `every_s` seconds (and on
    each new phase), then the final card and the run's status; return the ended run."""
    print(f"\n== {label}: run {run['id']}", flush=True)
    printed_at, phase = 0.0, None
    for event in client.events(run["id"]):
        data = event["data"]
        if event["type"] == "stage" and data["status"] in ("running", "failed"):
            print(f"   stage {data['stage']:16} {data['status']}", flush=True)
        elif event["type"] == "card" and data.get("step") is not None:
            now = time.monotonic()
            if now - printed_at >= every_s or data.get("phase") != phase:
                print(progress_line(data), flush=True)
                printed_at, phase = now, data.get("phase")
    print(client.card_text(run["id"]), end="")
    ended = client.run(run["id"])
    reason = f": {ended['failure_reason']}" if ended.get("failure_reason") else ""
    print(f"run {ended['id']} {ended['status']}{reason}", flush=True)
    return ended


def submit(client: Client, spec: dict[str, Any], label: str) -> dict[str, Any] | None:
    try:
        run = client.submit(spec, idempotency_key=f"demo-{uuid.uuid4().hex}")
    except ApiCallError as exc:
        if exc.code == "not_implemented":
            print(f"\n== {label}: not available in this version ({exc})")
            return None
        raise
    return follow(client, run, label)


def artifact(client: Client, run_id: str, path: str) -> dict[str, Any] | None:
    response = client.http.get(f"/runs/{run_id}/artifacts/{path}")
    return response.json() if response.status_code == 200 else None


def cmd_demo(args: argparse.Namespace) -> int:
    stack = LocalStack(port=args.port)
    with stopped_on_exit(stack):
        try:
            url = stack.start(quiet=True)
        except RuntimeError as exc:
            print(f"trm demo: {exc}", file=sys.stderr)
            return 1
        print(f"trm demo: service on {url} (SQLite under ./var/, embedded Redis)")
        print(f"  {export_line(url)}   (for trm runs / trm watch in another shell)", flush=True)
        client = Client(base_url=url)
        code = 0
        try:
            code = run_demo(client, args)
        except ApiCallError as exc:
            print(f"trm demo: {exc}", file=sys.stderr)
            code = 1
        print(f"\ndashboard and API: {url}   (trm runs / trm show RUN / trm watch RUN)")
        if args.exit:
            return code
        print("Ctrl-C stops the service.", flush=True)
        return serve_until_stopped(stack) or code
    return 1  # not reached: the block returns or raises


def run_demo(client: Client, args: argparse.Namespace) -> int:
    if args.dry_run:
        dry = submit(client, load_spec(SPECS / "train-routerbench-trm.dry.json"), "train dry run")
        return 0 if dry and dry["status"] == "completed" else 1
    trained = submit(client, load_spec(SPECS / "train-routerbench-trm.json"), "train trm")
    if trained is None:
        dry = submit(client, load_spec(SPECS / "train-routerbench-trm.dry.json"), "train dry run")
        return 0 if dry and dry["status"] == "completed" else 1
    if trained["status"] != "completed":
        print(f"train run {trained['status']}: {trained.get('failure_reason')}")
        return 1
    # Each router's bench scores what its train run scored (its `evaluate` sizes): those rows
    # come from the cache, and an LM's bench takes minutes, not an hour.
    routers: dict[str, dict[str, Any]] = {trained["id"]: {}}
    if args.qlora:
        qlora = load_spec(SPECS / "train-routerbench-qlora.json")
        adapter = submit(client, qlora, "train qlora")
        if adapter and adapter["status"] == "completed":
            routers[adapter["id"]] = qlora.get("evaluate") or {}
    code = 0
    for router, sizes in routers.items():
        spec = {
            "kind": "bench",
            "bench": "routerbench",
            "baseline": "none",
            "router": router,
            **sizes,
        }
        bench = submit(client, spec, f"routerBench: {router} vs untrained")
        if bench is None:
            card = artifact(client, router, "scorecard.json")
            if card:
                print(json.dumps({k: card.get(k) for k in HEADLINE}, indent=2))
            continue
        if bench["status"] != "completed":
            code = 1
        card = artifact(client, bench["id"], "scorecard.json")
        if card:
            print(bench_summary(card, f"var/runs/{bench['id']}/scorecard.json"))
    return code


def _score(block: dict[str, Any] | None, key: str) -> str:
    score = ((block or {}).get("scores") or {}).get(key) or {}
    if score.get("value") is None:
        return "-"
    low, high = score.get("ci95") or (None, None)
    return f"{score['value']:.3f} [{low:.3f}, {high:.3f}] n={score.get('n')}"


def bench_summary(card: dict[str, Any], path: str) -> str:
    """The router against the baseline and against what a user would pick instead (majority,
    the gbdt reference), each with the paired difference on the same anchors."""
    delta = (card.get("delta") or {}).get("anchor_score") or {}
    lines = [
        f"routerBench anchors ({card.get('bench')}):",
        f"  router    anchor {_score(card.get('router'), 'anchor_score')}",
        f"  baseline  anchor {_score(card.get('baseline'), 'anchor_score')}"
        f"   router - baseline {_delta(delta)}"
        f"   McNemar p={((card.get('delta') or {}).get('mcnemar') or {}).get('p_value')}",
    ]
    for name, ref in (card.get("references") or {}).items():
        score = {"scores": {"anchor_score": ref.get("anchor_score")}}
        p = (ref.get("mcnemar") or {}).get("p_value")
        lines.append(
            f"  {name:9} anchor {_score(score, 'anchor_score')}   router - {name} "
            f"{_delta(ref.get('delta') or {})}   McNemar p={p}"
        )
    lines.append(f"  full scorecard: {path}")
    return "\n".join(lines)


def _delta(delta: dict[str, Any]) -> str:
    if delta.get("value") is None:
        return "-"
    low, high = delta.get("ci95") or (float("nan"), float("nan"))
    return f"{delta['value']:+.3f} [{low:+.3f}, {high:+.3f}]"
