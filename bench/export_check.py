"""Check: an exported controller decides as the service does on every family's anchor rows.

    .venv/bin/python bench/export_check.py [--families route,grid,rebalance,schedule,verify]
        [--gen-seed 4242] [--worlds 6] [--episodes 12] [--epochs 3] [--keep DIR] [--json FILE]

Per family of bench/quality.py (a corpus built as it builds one: `trm envs generate` worlds, split
by env, the last two worlds the anchors) and for routerBench (the shipped bench's data, built as
`specs/train-routerbench-trm.json` builds it, as bench/decide.py does): a small trm (`--epochs`)
and a gbdt trained on the train rows, each exported (`worker/decide/export.py`, what `trm export`
runs) and the export's `decide.py` run in a `python -I` that can import neither the project nor
torch, on every anchor row. The reference is the trained policy's own forward (torch for the
trm). A row agrees when the action is the same and every probability is within the export's
tolerance (1e-4). Also per anchor row: the decision-time encoder's matrix
(worker/decide/fast_encode.py) against the general encoder's, bit for bit, and the service
controller's action against the policy's own. Prints one line per family and trainer: anchor
rows, rows that disagree, the largest probability difference, rows the decision-time encoder
differs on; exit 1 on any disagreement. docs/export.md records a run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from quality import FAMILIES, corpus_for  # noqa: E402  (bench/quality.py's corpora)

from core.rundir import ANCHOR_ROWS  # noqa: E402
from worker.decide.export import export_controller  # noqa: E402
from worker.train import gbdt, trm  # noqa: E402
from worker.train.callbacks import TrainerCallbacks  # noqa: E402


def routerbench_corpus(root: Path) -> Path:
    from decide import build_corpus_only

    return build_corpus_only(root)


def check(corpus: Path, root: Path, epochs: int) -> list[dict[str, Any]]:
    """A trm and a gbdt trained on `corpus`, exported and checked on its anchor rows."""
    out = []
    for trainer, module, config in (("trm", trm, {"epochs": epochs}), ("gbdt", gbdt, {})):
        folder = root / trainer
        started = time.perf_counter()
        module.train(config, corpus, folder, TrainerCallbacks(), seed=0)
        trained_s = time.perf_counter() - started
        report = export_controller(
            folder, trainer, root / f"{trainer}-export", corpus / ANCHOR_ROWS
        )
        out.append(
            {
                "trainer": trainer,
                "anchors": report.checked,
                "disagree": len(report.disagreements),
                "max_probability_diff": report.max_score_diff,
                "encoder_differs": encoder_differs(folder, trainer, corpus / ANCHOR_ROWS),
                "train_s": round(trained_s, 1),
            }
        )
    return out


def encoder_differs(folder: Path, trainer: str, anchors: Path) -> int:
    """Anchor rows whose matrix from the decision-time encoder (worker/decide/fast_encode.py)
    is not the general encoder's bit for bit, or whose action from the service's controller is
    not the policy's own."""
    import numpy as np

    from worker.decide.controller import DecideRow, load_controller
    from worker.models.policy import argmax
    from worker.models.rows import read_rows

    controller = load_controller(folder, trainer)
    assert controller.encoder is not None
    rows = [DecideRow(r["state"], list(r["tools"])) for r in read_rows(anchors)]
    scores = controller.policy.scores_batch([r.state for r in rows], [r.tools for r in rows])
    differ = 0
    for row, want in zip(rows, scores, strict=True):
        fast, _ = controller.encoder.raw([(row.state, row.tools)])
        same = np.array_equal(fast, controller.policy.space.raw(row.state, row.tools), True)
        action = controller.decide([row])[0].action
        differ += not same or action != row.tools[argmax(want)]
    return differ


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--families", default=",".join(FAMILIES) + ",routerbench")
    parser.add_argument("--gen-seed", type=int, default=4242, help="the worlds' generation seed")
    parser.add_argument("--worlds", type=int, default=6, help="worlds per family")
    parser.add_argument("--episodes", type=int, default=12, help="episodes per world")
    parser.add_argument("--epochs", type=int, default=3, help="the trm's training epochs")
    parser.add_argument("--keep", type=Path, help="keep the corpora, models and exports here")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="trm-export-check-"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    print(
        f"{'family':>11} {'trainer':>7} | {'anchors':>7} {'disagree':>8} {'max diff':>9} | "
        f"{'encoder differs':>15}"
    )
    for family in args.families.split(","):
        if family == "routerbench":
            corpus = routerbench_corpus(work / "routerbench")
        else:
            corpus = corpus_for(work, family, args.gen_seed, "full", args)
        for r in check(corpus, work / f"models-{family}", args.epochs):
            results.append({"family": family, **r})
            print(
                f"{family:>11} {r['trainer']:>7} | {r['anchors']:>7} {r['disagree']:>8} "
                f"{r['max_probability_diff']:>9.1e} | {r['encoder_differs']:>15}",
                flush=True,
            )
    rows = sum(r["anchors"] for r in results)
    bad = sum(r["disagree"] + r["encoder_differs"] for r in results)
    print(
        f"{len(results)} exports, {rows} anchor rows, {bad} disagree (the export with the "
        "service, or the decision-time encoder with the general one)"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
