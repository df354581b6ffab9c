"""The `routellm` bench: RouteLLM's routing metrics, its labels read as corpus rows, the driver.

The metric tests need no data; the reader tests write small checkouts in RouteLLM's layout; one
test reads the real copy in ../shared/datasets/routellm and skips when it is absent.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from core.schemas.corpus import CorpusSpec
from worker.corpus import CorpusInputError, build_corpus
from worker.corpus.routellm import STRONG_MODEL, WEAK_MODEL
from worker.corpus.rows import Tally
from worker.corpus.sources import discover, read_source
from worker.external import BENCHES, routing
from worker.external.routellm import MMLU_UNSEEN, RouteLlmBench, unseen_subjects
from worker.models.rows import read_rows

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / ".." / "shared" / "datasets" / "routellm"
HEADER = ["prompt", WEAK_MODEL, STRONG_MODEL]


def write_csv(path: Path, rows: list[list[str]], header: list[str] = HEADER) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def checkout(root: Path, subjects: dict[str, list[list[str]]], gsm8k: list[list[str]]) -> Path:
    """A RouteLLM checkout's evaluation data: `<root>/routellm/evals/{mmlu,gsm8k}`."""
    evals = root / "routellm" / "evals"
    for subject, rows in subjects.items():
        write_csv(evals / "mmlu" / "responses" / f"mmlu_{subject}.csv", rows)
    write_csv(evals / "gsm8k" / "gsm8k_responses.csv", gsm8k)
    for bench, prompt in (("mmlu", "a contaminated question"), ("gsm8k", "a leaked problem")):
        line = json.dumps({"train_prompt": prompt, "eval_prompt": prompt, "eval_idx": 0})
        (evals / bench / "contaminated_prompts.jsonl").write_text(line + "\n")
    return root


def read(path: Path, **fields: object) -> tuple[list, Tally]:
    spec = CorpusSpec.model_validate(
        {"sources": [{"type": "routellm", "name": "rl", "path": str(path), **fields}]}
    )
    ((files, _),) = discover(spec)
    tally = Tally("rl", "routellm", str(path))
    return read_source(spec.sources[0], files, tally, lambda _: None), tally


# --- the metric -------------------------------------------------------------------------------


def test_random_routing_recovers_half_the_gap() -> None:
    rng = np.random.default_rng(7)
    outcomes = routing.Outcomes.of(rng.random(4000) < 0.68, rng.random(4000) < 0.81)
    constant = routing.curve(np.zeros(4000), outcomes)
    assert constant.apgr() == pytest.approx(0.5)
    assert constant.cpt(0.5) == pytest.approx(0.5)
    draws = routing.resamples(4000, count=200)
    score = routing.score_router([rng.random(4000) for _ in range(2)], outcomes, draws)
    assert score.apgr == pytest.approx(0.5, abs=0.04)
    assert score.apgr_ci95[0] < 0.5 < score.apgr_ci95[1]


def test_the_oracle_traces_the_highest_curve_any_router_can() -> None:
    weak = [1, 0, 1, 0, 1, 0, 1]
    strong = [1, 1, 0, 0, 1, 1, 1]
    outcomes = routing.Outcomes.of(weak, strong)
    oracle = routing.curve(outcomes.oracle_scores(), outcomes)
    best = max(
        routing.curve(np.array(order, dtype=float), outcomes).apgr()
        for order in itertools.permutations(range(7))
    )
    # PGR 0 -> 2 over the two prompts only the strong model gets, flat over the four ties,
    # down to 1 over the one prompt only the weak model gets: 2/7 + 8/7 + 3/14.
    assert oracle.apgr() == pytest.approx(best) == pytest.approx(23 / 14)
    assert oracle.cpt(1.0) == pytest.approx(1 / 7)


def test_every_curve_runs_from_always_weak_to_always_strong() -> None:
    outcomes = routing.Outcomes.of([1, 0, 0, 1, 0], [1, 1, 0, 0, 1])
    for scores in ([0.9, 0.1, 0.5, 0.3, 0.7], [0, 0, 0, 0, 0], outcomes.oracle_scores()):
        curve = routing.curve(scores, outcomes)
        assert (curve.shares[0], curve.pgr[0]) == (0.0, 0.0)  # always weak
        assert (curve.shares[-1], curve.pgr[-1]) == pytest.approx((1.0, 1.0))  # always strong
        assert curve.quality[0] == pytest.approx(0.4) and curve.quality[-1] == pytest.approx(0.6)
        assert curve.points()[0] == (0.0, 0.4) and curve.points()[-1] == (1.0, 0.6)


def test_a_router_that_never_reaches_a_level_has_no_cpt() -> None:
    outcomes = routing.Outcomes.of([1, 0, 1, 0], [1, 1, 1, 0])
    backwards = routing.curve(-outcomes.oracle_scores(), outcomes)
    assert backwards.cpt(1.5) is None
    assert backwards.cpt(1.0) == 1.0


# --- the corpus source ------------------------------------------------------------------------


def test_the_label_is_strong_only_where_the_strong_model_alone_is_right(tmp_path: Path) -> None:
    rows = [
        ["both right", "True", "True"],
        ["only strong", "False", "True"],
        ["only weak", "True", "False"],
        ["both wrong", "False", "False"],
    ]
    root = checkout(tmp_path, {"anatomy": rows}, [["two plus two", "False", "True"]])
    found, tally = read(root)
    actions = {json.loads(r.state)["prompt"]: r.action for r in found}
    assert actions == {
        "both right": "weak",
        "only strong": "strong",
        "only weak": "weak",
        "both wrong": "weak",
        "two plus two": "strong",
    }
    first = found[0]
    assert first.tools == ["weak", "strong"]
    assert json.loads(first.state) == {
        "prompt": "both right",
        "models": [{"name": "weak", "price": 0.24}, {"name": "strong", "price": 24.7}],
    }
    assert (first.env, first.meta["benchmark"], first.meta["subject"]) == (
        "mmlu-anatomy",
        "mmlu",
        "anatomy",
    )
    assert (first.meta["weak_correct"], first.meta["strong_correct"]) == (True, True)
    assert found[-1].env == "gsm8k" and tally.rows_read == 5 and not tally.invalid


def test_the_source_takes_a_checkout_its_evals_folder_or_the_data_folder(tmp_path: Path) -> None:
    root = checkout(tmp_path / "repo", {"anatomy": [["q", "True", "True"]]}, [["p", "1", "0"]])
    for path in (root, root / "routellm", root / "routellm" / "evals"):
        found, _ = read(path)
        assert len(found) == 2
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusInputError, match=r"sources\[0\]\.path.*lm-sys/RouteLLM"):
        read(tmp_path / "empty")


def test_contaminated_prompts_are_dropped_and_counted(tmp_path: Path) -> None:
    root = checkout(
        tmp_path,
        {"anatomy": [["q", "True", "True"], ["a contaminated question", "0", "1"]]},
        [["a leaked problem", "False", "True"], ["p", "True", "True"]],
    )
    found, tally = read(root)
    assert [json.loads(r.state)["prompt"] for r in found] == ["q", "p"]
    assert tally.invalid == {"contaminated": 2} and tally.rows_read == 4
    kept_all, _ = read(root, drop_contaminated=False)
    assert len(kept_all) == 4


def test_bad_records_are_counted_with_their_file_and_line(tmp_path: Path) -> None:
    rows = [
        ["fine\nover two lines", "True", "False"],  # lines 2-3
        ["unsure", "maybe", "True"],  # line 4: bad_label
        ["", "True", "True"],  # line 5: missing_state
        ["fine again", "False", "False"],  # line 6
    ]
    root = checkout(tmp_path, {"anatomy": rows}, [["p", "True", "True"]])
    path = root / "routellm" / "evals" / "mmlu" / "responses" / "mmlu_anatomy.csv"
    with path.open("a", encoding="utf-8") as handle:
        handle.write("short row,True\n")  # line 7: bad_csv_row
    found, tally = read(root)
    assert len(found) == 3
    label = "mmlu/responses/mmlu_anatomy.csv"
    assert tally.examples == {
        "bad_label": {label: [4]},
        "missing_state": {label: [5]},
        "bad_csv_row": {label: [7]},
    }
    assert found[1].meta["line"] == 6


def test_a_file_that_is_not_routellms_table_is_refused_naming_file_and_line(
    tmp_path: Path,
) -> None:
    root = checkout(tmp_path, {"anatomy": [["q", "True", "True"]]}, [["p", "True", "True"]])
    evals = root / "routellm" / "evals"
    write_csv(evals / "mmlu" / "responses" / "mmlu_virology.csv", [["q", "1"]], ["prompt", "x"])
    with pytest.raises(CorpusInputError, match=r"mmlu_virology\.csv: line 1: want the header"):
        read(root)
    (evals / "mmlu" / "responses" / "mmlu_virology.csv").write_text(
        ",".join(HEADER) + '\nq,True,True\n"an open quote,True,True\nnext,True,True\n'
    )
    with pytest.raises(CorpusInputError, match=r"mmlu_virology\.csv: line \d+: not a CSV record"):
        read(root)


def test_a_prompt_holding_a_line_separator_stays_one_train_row(tmp_path: Path) -> None:
    """U+0085 is a line break to str.splitlines; one real MMLU prompt holds it."""
    root = checkout(tmp_path, {"anatomy": [["a\x85b", "True", "True"]]}, [["p", "1", "1"]])
    spec = CorpusSpec.model_validate(
        {
            "sources": [{"type": "routellm", "name": "rl", "path": str(root)}],
            "split": {"by": "env", "val_fraction": 0.0},
            "min_exact_positives": 0,
        }
    )
    build_corpus(spec, tmp_path / "corpus")
    rows = read_rows(tmp_path / "corpus" / "train.jsonl")
    assert sorted(json.loads(r["state"])["prompt"] for r in rows) == ["a\x85b", "p"]


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"RouteLLM's data is not at {SHARED}")
def test_the_real_checkout_reads_every_prompt() -> None:
    found, tally = read(SHARED)
    assert tally.rows_read == 14_042 + 1_319
    assert tally.invalid == {"contaminated": 5 + 12}
    mmlu = [r for r in found if r.meta["benchmark"] == "mmlu"]
    assert len(mmlu) == 14_037 and len({r.env for r in mmlu}) == 57
    # "Always weak" is the right label on 82% of MMLU: accuracy is not the score.
    assert sum(r.action == "weak" for r in mmlu) / len(mmlu) == pytest.approx(0.822, abs=0.001)


# --- the bench and the driver -----------------------------------------------------------------


def eight_subjects(root: Path) -> tuple[Path, dict[str, list[list[str]]]]:
    """A checkout of 8 MMLU subjects of 30 prompts and 40 GSM8K problems, answers at random."""
    rng = np.random.default_rng(0)

    def answers(weak: float, strong: float) -> list[str]:
        return [str(rng.random() < weak), str(rng.random() < strong)]

    subjects = {
        f"subject_{i}": [[f"question {i}.{j} topic {j % 5}", *answers(0.6, 0.8)] for j in range(30)]
        for i in range(8)
    }
    gsm8k = [[f"problem {j}", *answers(0.6, 0.9)] for j in range(40)]
    return checkout(root, subjects, gsm8k), subjects


def test_the_bench_scores_baselines_on_unseen_subjects_and_gsm8k(tmp_path: Path) -> None:
    root, subjects = eight_subjects(tmp_path / "repo")
    bench = RouteLlmBench(splits=(0,))
    rows = bench.run(tmp_path / "work", root, ["baselines"], [0, 1], lambda _: None)
    by = {(r.anchors, r.method): r for r in rows}
    assert {a for a, _ in by} == {MMLU_UNSEEN, "gsm8k"}
    unseen = by[(MMLU_UNSEEN, "oracle")]
    assert unseen.n == 30 * len(unseen_subjects(list(subjects)))
    for anchors in (MMLU_UNSEEN, "gsm8k"):
        oracle = by[(anchors, "oracle")]
        others = [by[(anchors, m)] for m in ("random", "tfidf-logreg")]
        assert all(oracle.value >= r.value for r in others)
        assert by[(anchors, "always-weak")].extra["pgr"] == 0.0
        assert by[(anchors, "random")].seeds == 2
        assert oracle.curve[0][0] == 0.0 and oracle.curve[-1][0] == 1.0


def test_several_anchor_splits_are_each_reported_and_judged_by_their_mean(tmp_path: Path) -> None:
    root, subjects = eight_subjects(tmp_path / "repo")
    assert unseen_subjects(list(subjects), 0) != unseen_subjects(list(subjects), 1)
    rows = RouteLlmBench(splits=(0, 1)).run(
        tmp_path / "work", root, ["baselines"], [0], lambda _: None
    )
    by = {(r.anchors, r.method): r for r in rows}
    assert {a for a, _ in by} == {
        f"{MMLU_UNSEEN}@split0",
        f"{MMLU_UNSEEN}@split1",
        "gsm8k@split0",
        "gsm8k@split1",
        MMLU_UNSEEN,
        "gsm8k",
    }
    for method in ("tfidf-logreg", "oracle", "always-weak"):
        one, two = by[(f"{MMLU_UNSEEN}@split0", method)], by[(f"{MMLU_UNSEEN}@split1", method)]
        mean = by[(MMLU_UNSEEN, method)]
        assert mean.value == pytest.approx((one.value + two.value) / 2)
        assert mean.n == one.n + two.n == 2 * 30 * len(unseen_subjects(list(subjects)))
        assert mean.extra["splits"] == 2
        assert mean.extra["split_spread"] == pytest.approx(abs(one.value - two.value))
        assert mean.ci95[0] <= mean.value <= mean.ci95[1]
    # The mean over two splits' independent resamples is surer than either split alone.
    width = lambda r: r.ci95[1] - r.ci95[0]  # noqa: E731
    oracle = [by[(f"{MMLU_UNSEEN}@split{k}", "oracle")] for k in (0, 1)]
    assert width(by[(MMLU_UNSEEN, "oracle")]) < min(width(r) for r in oracle)
    # The targets judge the mean: a router scoring as random did, split by split.
    router = [dataclasses.replace(r, method="trm") for r in rows if r.method == "random"]
    (what, met, seen), *_ = RouteLlmBench().targets(rows + router)
    mean = by[(MMLU_UNSEEN, "random")].value
    assert "above random" in what and not met and seen.startswith(f"{mean:.3f} ")
    assert {by[(f"{MMLU_UNSEEN}@split{k}", "random")].value for k in (0, 1)} != {mean}


def test_the_driver_says_why_a_set_is_skipped(tmp_path: Path) -> None:
    assert "routellm" in BENCHES
    out = subprocess.run(
        [
            sys.executable,
            "bench/external.py",
            "--sets",
            "routellm",
            "--methods",
            "baselines",
            "--data",
            f"routellm={tmp_path / 'nothing'}",
            "--work",
            str(tmp_path / "work"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stderr
    assert "SKIP  routellm:" in out.stdout and "holds no RouteLLM evaluation data" in out.stdout
