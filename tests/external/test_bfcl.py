"""The `bfcl` bench: BFCL's questions read as corpus rows (the function called, or no call), the
grouped folds, and the lexical baseline the community's figures are compared with.

Every test reads the bfcl-eval package's data files (installed without their dependencies) and
skips when they are absent; the reader and fold tests use small copies in tmp_path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.schemas.corpus import CorpusSpec
from core.schemas.sources import bfcl_data_folder
from worker.corpus import CorpusInputError
from worker.corpus.bfcl import NO_CALL
from worker.corpus.rows import Row, Tally
from worker.corpus.sources import discover, read_source
from worker.external import BENCHES
from worker.external.bfcl import Baseline, build_folds, lexical_pick

FOUND = bfcl_data_folder()
DATA = Path(FOUND) if FOUND else None
pytestmark = pytest.mark.skipif(
    DATA is None, reason="BFCL's data is absent: `pip install --no-deps bfcl-eval`"
)
CATEGORIES = ["multiple", "live_multiple", "irrelevance", "live_irrelevance"]


def read(path: Path, categories: list[str] = CATEGORIES) -> tuple[list[Row], Tally]:
    spec = CorpusSpec.model_validate(
        {"sources": [{"type": "bfcl", "name": "b", "path": str(path), "categories": categories}]}
    )
    ((files, _),) = discover(spec)
    tally = Tally("b", "bfcl", str(path))
    return read_source(spec.sources[0], files, tally, lambda _: None), tally


def small_copy(folder: Path, rows: int, categories: list[str] = CATEGORIES) -> Path:
    """The first `rows` lines of each category's questions and answers."""
    assert DATA is not None
    for category in categories:
        for part in ("", "possible_answer/"):
            origin = DATA / part / f"BFCL_v4_{category}.json"
            if origin.is_file():
                target = folder / part / origin.name
                target.parent.mkdir(parents=True, exist_ok=True)
                lines = origin.read_text().splitlines(keepends=True)[:rows]
                target.write_text("".join(lines))
    return folder


def test_the_reader_counts_every_row_of_each_category() -> None:
    assert DATA is not None
    rows, tally = read(DATA)
    assert tally.kinds == {
        "multiple": 200,
        "live_multiple": 1053,
        "irrelevance": 240,
        "live_irrelevance": 884,
    }
    assert tally.rows_read == len(rows) == 2377
    assert "possible_answer/BFCL_v4_live_multiple.json" in tally.files


def test_the_label_is_the_function_the_answer_calls_and_dotted_names_stay_whole() -> None:
    assert DATA is not None
    rows, _ = read(DATA, ["multiple"])
    row = next(r for r in rows if r.meta["id"] == "multiple_1")
    assert row.action == "math.triangle_area_heron"
    assert row.tools[-1] == NO_CALL
    state = json.loads(row.state)
    assert [f["name"] for f in state["functions"]] == row.tools[:-1]
    assert "Heron" in state["functions"][row.tools.index(row.action)]["description"]
    assert state["question"].startswith("Calculate the area of a triangle")
    assert row.meta["category"] == "multiple" and row.env.startswith("fns-")


def test_irrelevance_rows_are_abstentions() -> None:
    assert DATA is not None
    rows, _ = read(DATA, ["irrelevance", "live_irrelevance"])
    assert rows and all(r.action == NO_CALL and r.tools[-1] == NO_CALL for r in rows)
    # A few live rows offer no function at all: abstaining is their only candidate.
    assert any(r.tools == [NO_CALL] for r in rows)


def test_a_malformed_line_is_refused_naming_the_file_and_line(tmp_path: Path) -> None:
    folder = small_copy(tmp_path / "data", 4, ["multiple"])
    questions = folder / "BFCL_v4_multiple.json"
    lines = questions.read_text().splitlines(keepends=True)
    questions.write_text(lines[0] + lines[1][:40] + "\n" + "".join(lines[2:]))
    with pytest.raises(CorpusInputError, match=r"BFCL_v4_multiple\.json: line 2: not JSON"):
        read(folder, ["multiple"])

    questions.write_text("".join(lines))
    answers = folder / "possible_answer" / "BFCL_v4_multiple.json"
    truth = [json.loads(line) for line in answers.read_text().splitlines()]
    truth[2]["ground_truth"].append(truth[2]["ground_truth"][0])  # two calls
    answers.write_text("".join(json.dumps(t) + "\n" for t in truth))
    with pytest.raises(
        CorpusInputError,
        match=r"possible_answer/BFCL_v4_multiple\.json: line 3: "
        "ground_truth must be exactly one call",
    ):
        read(folder, ["multiple"])


def test_the_folds_never_share_a_function_set_and_score_every_row_once(tmp_path: Path) -> None:
    folder = small_copy(tmp_path / "data", 25)
    folds = build_folds(folder, tmp_path / "work", CATEGORIES, lambda _: None)
    assert len(folds) == 5
    scored: list[str] = []
    for fold in folds:
        manifest = json.loads((fold.corpus / "manifest.json").read_text())
        assert manifest["split"]["disjoint"], manifest["split"]["overlaps"]
        trained = {
            json.loads(line)["meta"]["env"]
            for split in ("train", "val")
            for line in (fold.corpus / f"{split}.jsonl").read_text().splitlines()
        }
        anchors = [
            json.loads(line) for line in (fold.corpus / "anchor.jsonl").read_text().splitlines()
        ]
        assert trained and not trained & {a["meta"]["env"] for a in anchors}
        scored += fold.ids
        assert all(n >= new >= 0 for n, new in fold.names.values())
    assert len(scored) == len(set(scored)) == 100
    # Names with dots reach the corpus whole.
    assert any("." in t for f in folds for tools in f.tools for t in tools)


def test_a_fold_selection_builds_and_scores_only_those_folds(tmp_path: Path) -> None:
    folder = small_copy(tmp_path / "data", 25)
    every = build_folds(folder, tmp_path / "all", CATEGORIES, lambda _: None)
    some = build_folds(folder, tmp_path / "some", CATEGORIES, lambda _: None, [1, 3])
    assert [f.ids for f in some] == [every[1].ids, every[3].ids]
    assert sorted(p.name for p in (tmp_path / "some").iterdir()) == ["corpus-fold1", "corpus-fold3"]
    with pytest.raises(ValueError, match=r"folds \[5\]: the folds are 0-4"):
        build_folds(folder, tmp_path / "bad", CATEGORIES, lambda _: None, [5])


def test_the_lexical_pick_reproduces_its_published_figures() -> None:
    assert DATA is not None
    for category, expected in (("multiple", 0.940), ("live_multiple", 0.727)):
        rows, _ = read(DATA, [category])
        picks = [lexical_pick(r.state_obj["question"], r.state_obj["functions"]) for r in rows]
        hits = [r.tools[pick or 0] == r.action for r, pick in zip(rows, picks, strict=True)]
        assert round(sum(hits) / len(hits), 3) == expected, category


def test_the_baselines_pick_no_call_only_where_no_function_is_offered() -> None:
    state = json.dumps({"question": "weather in Paris", "functions": []})
    for name in ("lexical", "first-listed", "random"):
        assert Baseline(name).scores(state, [NO_CALL]) == [1.0]
    offered = {
        "question": "What is the weather in Paris?",
        "functions": [
            {"name": "math.factorial", "description": "Factorial of a number."},
            {"name": "get_current_weather", "description": "The weather in a city."},
        ],
    }
    tools = ["math.factorial", "get_current_weather", NO_CALL]
    assert Baseline("lexical").act(json.dumps(offered), tools) == "get_current_weather"
    assert Baseline("first-listed").act(json.dumps(offered), tools) == "math.factorial"


def test_the_bench_is_registered_and_the_source_defaults_to_the_installed_data() -> None:
    assert "bfcl" in BENCHES
    spec = CorpusSpec.model_validate({"sources": [{"type": "bfcl", "name": "b"}]})
    assert spec.sources[0].path == FOUND
