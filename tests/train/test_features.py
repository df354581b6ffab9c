"""The encoding every learner reads (worker/features/): what it lets a model see about
lists and about candidate sets larger than any in training."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.train.tiny import tiny_trm
from worker.context import StageFailure
from worker.models.feature_space import FeatureSpace, row_features
from worker.train.callbacks import TrainerCallbacks
from worker.train.trm import train

TINY = tiny_trm(epochs=40)
VERDICTS = ["verdict:accept", "verdict:reject"]


def write(root: Path, split: str, rows: list[dict]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_worlds(
    root: Path, row: Callable[[random.Random, int], dict], rng: random.Random, unseen: int
) -> list[dict]:
    """A corpus of `row(rng, world)` rows: train 240 from worlds 0-3 in turn, val 60 from world
    4; `unseen` rows of world 5 are returned, to score on."""
    write(root, "train", [row(rng, w % 4) for w in range(240)])
    write(root, "val", [row(rng, 4) for _ in range(60)])
    return [row(rng, 5) for _ in range(unseen)]


def proposal_row(rng: random.Random) -> dict:
    """A plan for some jobs: sound unless it leaves a job out or names one slot twice. The slot
    names are drawn from a large pool, so which slots a plan names says nothing."""
    jobs = [{"name": f"job{i}", "dur": rng.randint(1, 4)} for i in range(rng.randint(3, 6))]
    slots = rng.sample([f"s{k}" for k in range(200)], len(jobs))
    flaw = rng.choice([None, None, "short", "twice"])
    if flaw == "short":
        slots.pop(rng.randrange(len(slots)))
    elif flaw == "twice":
        i, j = rng.sample(range(len(slots)), 2)
        slots[i] = slots[j]
    state = {"instance": {"jobs": jobs}, "proposal": slots}
    return {
        "state": json.dumps(state),
        "tools": VERDICTS,
        "action": VERDICTS[flaw is not None],
        "meta": {},
    }


def test_a_plan_missing_a_job_or_naming_a_slot_twice_is_learned_to_be_rejected(
    tmp_path: Path,
) -> None:
    rng = random.Random(8)
    for split, n in (("train", 300), ("val", 120)):
        write(tmp_path / "corpus", split, [proposal_row(rng) for _ in range(n)])
    result = train(TINY, tmp_path / "corpus", tmp_path / "out", TrainerCallbacks(), seed=0)
    # Before list shapes were encoded, a list of names was only a set: length and repeats lost.
    assert result["eval"]["val_accuracy"] >= 0.95


def slot_row(rng: random.Random, machines: int, horizon: int) -> dict:
    """Place a job on the state's machine at the earliest slot at or after it is ready."""
    tools = [f"place:m{m}@t{t}" for t in range(horizon) for m in range(machines)]
    machine, ready = rng.randrange(machines), rng.randrange(horizon - 1)
    state = {"machine": f"m{machine}", "ready": ready, "noise": rng.randint(0, 9)}
    return {
        "state": json.dumps(state),
        "tools": tools,
        "action": f"place:m{machine}@t{ready}",
        "meta": {},
    }


def test_a_rule_learned_on_small_candidate_sets_holds_on_three_times_larger_ones(
    tmp_path: Path,
) -> None:
    rng = random.Random(3)
    write(tmp_path / "corpus", "train", [slot_row(rng, 2, 5) for _ in range(300)])
    write(tmp_path / "corpus", "val", [slot_row(rng, 3, 10) for _ in range(100)])
    accuracies = [
        train(TINY, tmp_path / "corpus", tmp_path / f"out{seed}", TrainerCallbacks(), seed=seed)[
            "eval"
        ]["val_accuracy"]
        for seed in (0, 1, 2)
    ]  # 10 candidates in training, 30 here; a tiny net's init still moves one seed of three
    assert sorted(accuracies)[1] >= 0.95 and min(accuracies) >= 0.75, accuracies


def test_the_earliest_slot_of_each_machine_reads_the_same_however_many_candidates() -> None:
    small = [f"place:m{m}@t{t}" for t in range(4) for m in range(2)]
    large = [f"place:m{m}@t{t}" for t in range(10) for m in range(3)]
    for tools in (small, large):
        features = dict(zip(tools, row_features("{}", tools), strict=True))
        assert features["place:m1@t0"]["GLO:1"] == 0.0  # the first slot on its machine
        assert features["place:m1@t2"]["GLO:1"] == 2.0
        assert features["place:m1@t2"]["GLO:0"] == 1.0  # one machine number above the least
        assert all("n" not in f for f in features.values())  # no count of candidates


def test_a_feature_space_of_an_older_encoding_asks_to_train_again(tmp_path: Path) -> None:
    path = tmp_path / "features.json"
    path.write_text(json.dumps({"format": "trm-features/1", "names": [], "mean": [], "scale": []}))
    with pytest.raises(StageFailure) as raised:
        FeatureSpace.load(path)
    assert raised.value.failure_class == "dependency" and "train the model again" in str(
        raised.value
    )


def test_a_line_of_cells_keyed_by_the_candidate_is_read_at_the_candidates_own_slot() -> None:
    """`busy.oven` is the oven's time line; `place:oven@t3` is read at cell 3, whatever the
    machine is called, and a digit in a machine's name (`cpu0`) is not taken for its time."""
    state = {"job": {"dur": 2}, "busy": {"oven": "..#....", "cpu0": "....#.."}}
    tools = ["place:oven@t2", "place:oven@t3", "place:cpu0@t3", "place:cpu0@t9"]
    features = dict(zip(tools, row_features(json.dumps(state), tools), strict=True))
    taken, free, short, past = (features[t] for t in tools)
    assert taken["AT:busy.*|0:#"] == 1.0 and "AT:busy.*|0:." not in taken
    assert free["AT:busy.*|0:."] == 1.0 and free["RUN:busy.*|0:."] == 4.0  # cells 3..6 are free
    assert short["RUN:busy.*|0:."] == 1.0  # cell 4 is busy: a 2-slot job does not fit at 3
    assert short["D:RUN:busy.*|0:.|job.dur"] == -1.0  # compared with the job's length
    assert short["GE:RUN:busy.*|0:.|job.dur"] == 0.0 and free["GE:RUN:busy.*|0:.|job.dur"] == 1.0
    assert taken["RUN:busy.*|0:#"] == 1.0 and "RUN:busy.*|0:." not in taken
    assert short["N:0"] == free["N:0"] == 3.0  # the time, not cpu0's 0
    assert past["AT:busy.*|0:past"] == 1.0  # beyond the line's end


def test_text_with_spaces_or_many_symbols_is_not_read_as_cells() -> None:
    state = {"notes": {"oven": "runs hot at 3"}, "codes": {"oven": "abcdefgh"}}
    tools = ["place:oven@t3"]
    (features,) = row_features(json.dumps(state), tools)
    assert not any(name.startswith(("AT:", "RUN:")) for name in features)


def test_a_feature_only_one_world_shows_is_left_out_when_the_rows_span_several() -> None:
    """A name one world alone uses (its machine `oven`) cannot carry to an unseen world; what
    every world shows (the slot's time) stays."""
    rows = []
    for w in range(6):
        machine = "oven" if w == 0 else f"line{'ABCDE'[w - 1]}"
        for t in range(5):
            state = {"busy": {machine: "....."}, "job": {"release": t}}
            tools = [f"place:{machine}@t{k}" for k in range(5)]
            rows.append(
                {"state": json.dumps(state), "tools": tools, "action": tools[t], "env": f"w{w}"}
            )
    names = FeatureSpace.fit(rows).names
    assert "P:oven" not in names and "P:linea" not in names
    assert "D:N:0|job.release" in names and "GE:N:0|job.release" in names
    one_world = FeatureSpace.fit([r for r in rows if r["env"] == "w0"]).names
    assert "P:oven" not in one_world  # one value on every candidate: constant, left out anyway
    assert "D:N:0|job.release" in one_world  # with one world there is no floor


def test_what_only_one_train_world_holds_is_read_there_but_its_names_are_not() -> None:
    """A field only one train world's states hold (its furnace's temperature, or a grid only one
    world has) is what that kind of world says, and an unseen world of its kind has it too: it
    is kept. A piece of an id that one world alone spells, among ids every world spells, is
    still left out."""
    rows = []
    for w in range(6):
        machine = "oven" if w == 0 else f"line{'ABCDE'[w - 1]}"
        for t in range(5):
            state: dict = {"job": {"release": t}}
            if w == 0:
                state["furnace"] = {"temp": 100 + 20 * t}
            tools = [f"place:{machine}@t{k}" for k in range(5)]
            rows.append(
                {"state": json.dumps(state), "tools": tools, "action": tools[t], "env": f"w{w}"}
            )
    names = FeatureSpace.fit(rows).names
    assert "C:furnace.temp" in names  # only w0's states hold it: counted among the worlds that do
    assert "P:oven" not in names and "P:linea" not in names  # every world's ids have pieces
    assert "D:N:0|job.release" in names
