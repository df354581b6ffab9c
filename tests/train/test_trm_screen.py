"""What the trm's network reads: the columns a quick tree ranker finds worth a split (the model's
files hold only those, so the saved model decides on unseen rows without LightGBM), each as its
value, presence and sign; a model saved in the older two-number layout asks to be retrained."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.train.test_features import write
from tests.train.tiny import tiny_trm
from worker.context import StageFailure
from worker.models.feature_space import FeatureSpace
from worker.models.trm import load_trm
from worker.train.callbacks import TrainerCallbacks
from worker.train.trm import train
from worker.train.trm_screen import MIN_ROWS, screened

VERDICTS = ["verdict:accept", "verdict:reject"]
NOISE = 150  # numbers in every state that say nothing of the answer


def overrun_row(rng: random.Random, world: int) -> dict:
    """A plan is rejected when it overruns its budget (`overrun` > 0); every other number of the
    state is noise, drawn afresh per row."""
    overrun = rng.randint(-40, 40) or 1
    state = {"overrun": overrun, **{f"n{k}": rng.randint(0, 1000) for k in range(NOISE)}}
    return {
        "state": json.dumps(state),
        "tools": VERDICTS,
        "action": VERDICTS[overrun > 0],
        "meta": {"env": f"w{world}"},
    }


def write_overrun_corpus(root: Path, seed: int = 0) -> list[dict]:
    """train (worlds 0-3) and val (world 4); the unseen rows (world 5) are returned."""
    rng = random.Random(seed)
    write(root, "train", [overrun_row(rng, w) for w in range(4) for _ in range(40)])
    write(root, "val", [overrun_row(rng, 4) for _ in range(40)])
    return [overrun_row(rng, 5) for _ in range(200)]


def test_a_screened_trm_reads_the_deciding_column_among_noise_and_keeps_only_what_it_read(
    tmp_path: Path,
) -> None:
    unseen = write_overrun_corpus(tmp_path / "corpus")
    config = {**tiny_trm(30), "screen": 4}
    result = train(config, tmp_path / "corpus", tmp_path / "trm", TrainerCallbacks(), seed=0)
    space = FeatureSpace.load(tmp_path / "trm" / "features.json")
    assert len(space.names) <= 4 < result["features_screened_from"]
    assert result["features"] == len(space.names)
    assert any("overrun" in name for name in space.names), space.names
    # The card lists what the network reads, by the screen's gain, in words.
    assert any("overrun" in top["feature"] for top in result["top_features"])
    assert all(top["meaning"] for top in result["top_features"])
    policy = load_trm(tmp_path / "trm")  # the saved files alone: no ranker needed to decide
    right = sum(policy.act(r["state"], r["tools"]) == r["action"] for r in unseen)
    assert right / len(unseen) >= 0.95


def test_a_space_no_wider_than_the_screen_or_of_too_few_rows_is_read_whole(
    tmp_path: Path,
) -> None:
    write_overrun_corpus(tmp_path / "corpus")
    rows = [json.loads(line) for line in (tmp_path / "corpus" / "train.jsonl").open()]
    space = FeatureSpace.fit(rows, crossed_cells=False)
    assert screened(space, rows, [], len(space.names), seed=0).space is space
    assert screened(space, rows, [], 0, seed=0).space is space
    assert screened(space, rows[: MIN_ROWS - 1], [], 3, seed=0).space is space  # too few to judge
    cut = screened(space, rows, [], 3, seed=0).space
    assert 1 <= len(cut.names) <= 3
    assert all(cut.scale[i] == space.scale[space.names.index(n)] for i, n in enumerate(cut.names))


def test_a_trm_of_the_two_number_layout_asks_to_be_trained_again(tmp_path: Path) -> None:
    write_overrun_corpus(tmp_path / "corpus")
    train(tiny_trm(1), tmp_path / "corpus", tmp_path / "trm", TrainerCallbacks(), seed=0)
    config = tmp_path / "trm" / "config.json"
    config.write_text(config.read_text().replace('"trm-v3"', '"trm-v2"'))
    with pytest.raises(StageFailure, match="train it again") as refused:
        load_trm(tmp_path / "trm")
    assert refused.value.failure_class == "dependency"
