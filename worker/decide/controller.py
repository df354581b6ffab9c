"""A trained controller answering rows (`DecideRow`: a state and its candidate tools) with a
`Decision` each: the action, each candidate's probability, the margin and whether it abstains
(`decision.py` says how those are made).

It stands on the policies of evaluation (`worker/evaluate/policies.py`): the same files load the
same model, so a decision here is the argmax a bench scored. One `decide(rows)` is one scoring
call for the whole batch (the trm splits it into forwards of `SCORE_ROWS` rows).

**The trm's forward**: a call of up to `NUMPY_ROWS` rows runs the export's numpy forward
(`numpy_trm.py`) on the policy's own weights, a larger one torch's. On one thread (routerBench's
trm, 64 wide, n = T = 2, 3 halting steps) torch spent 3.2 ms on one row, numpy 1.3; 4.2 against
1.9 at 8 rows, 8.8 against 8.4 at 64, 22 against 32 at 256: torch's cost is mostly its fixed
cost per operation, numpy's grows with the rows. The two agree to a few 1e-6 on a score
(tests/decide/test_controller.py holds them to the same action and to 1e-5). A row the
controller cannot read raises `RowError` naming the field (`rows[3].tools`) before any model
runs; the bounds are the constants below.

**A gbdt's encoding**: its trees read a row's value of a column only where they split on it, so
a decision works out those columns alone (`split_columns`: 81 of routerBench's 742), the rest
0.0 (LightGBM copies a row's cells but its zeros: a 64-row call's predict took 35% less time
than with NaN there); the scores are the same, bit for bit (tests/decide/test_controller.py).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.rundir import ADAPTER, RUN_META
from worker.decide.decision import Decision, check_margin, decision
from worker.decide.fast_encode import FastEncoder
from worker.decide.numpy_trm import PAD_SCORE, Activation, NumpyTrm, gelu
from worker.evaluate.policies import load_policy
from worker.models.policy import Policy

__all__ = ["Controller", "DecideRow", "Decision", "RowError", "load_controller"]

TRAINERS = ("trm", "gbdt", "qlora")
MAX_ROWS = 4096  # rows per decide call
MAX_STATE_CHARS = 256 * 1024  # a state's JSON text
MAX_TOOLS = 256  # candidates per row
MAX_TOOL_CHARS = 256  # one candidate's id
NUMPY_ROWS = 64  # the most rows a trm call runs through the numpy forward (torch above)
TORCH_GELU_FROM = 4096  # values in an array from which the numpy forward runs torch's GELU


@dataclass(frozen=True)
class DecideRow:
    """A corpus row's shape without its action: the state as text (a caller given a JSON object
    serializes it) and the candidate tools, in order."""

    state: str
    tools: list[str]


class RowError(ValueError):
    """A row the controller cannot read; `field` names it (`rows[3].tools`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class Controller:
    """A loaded model behind `decide`. `trainer` is "trm", "gbdt" or "qlora"; `model_hash` the
    hash of its files (the policy's: the same weights give the same hash); `note` what every
    answer of a qlora says (it decides, slowly: `lm_note`), None for a trm or a gbdt."""

    def __init__(self, policy: Policy, trainer: str, abstain_margin: float | None = None) -> None:
        self.policy = policy
        self.trainer = trainer
        self.model_hash = policy.model_hash
        self.abstain_margin = check_margin(abstain_margin)
        self.numpy = NumpyForward.of(policy) if trainer == "trm" else None
        space = getattr(policy, "space", None)
        self.encoder = FastEncoder(space) if trainer in ("trm", "gbdt") and space else None
        # What `scores` encodes with: a gbdt's trees read a row only at their splits, so only
        # the columns they split on are worked out (the rest 0.0: the same predictions).
        self.decider = self.encoder
        if trainer == "gbdt" and space is not None:
            reads = split_columns(policy.booster)  # type: ignore[attr-defined]
            if reads is not None:
                self.decider = FastEncoder(space, reads)
        self.note = lm_note(policy) if trainer == "qlora" else None

    def decide(self, rows: Sequence[DecideRow]) -> list[Decision]:
        check_rows(rows)
        if not rows:
            return []
        scores = self.scores(rows)
        return [
            decision(row.tools, s, self.abstain_margin) for row, s in zip(rows, scores, strict=True)
        ]

    def scores(self, rows: Sequence[DecideRow]) -> list[list[float]]:
        """Each row's raw model scores, in its candidates' order (rows already checked)."""
        if self.encoder is None:  # an LM: it reads the row's text itself
            return self.policy.scores_batch([r.state for r in rows], [list(r.tools) for r in rows])
        assert self.decider is not None
        raw, counts = self.decider.raw([(r.state, r.tools) for r in rows])
        self.policy.forward_passes += 1
        if self.trainer == "gbdt":
            flat = self.policy.booster.predict(raw, num_threads=1)  # type: ignore[attr-defined]
            starts = np.cumsum([0, *counts])
            return [flat[a:b].tolist() for a, b in zip(starts[:-1], starts[1:], strict=True)]
        scaled = self.encoder.scaled(raw)
        wide = self._wide(rows, max(counts))
        if self.numpy is not None and len(rows) <= NUMPY_ROWS:
            final = self.numpy.net.infer(*pad_stacked(scaled, counts), wide)
        else:
            final = self._torch(scaled, counts, wide)
        return [row[:n] for row, n in zip(final.tolist(), counts, strict=True)]

    def _wide(self, rows: Sequence[DecideRow], widest: int) -> np.ndarray | None:
        """The linear text part's logits (rows, widest) of a trm that has one, else None."""
        buckets = int(getattr(getattr(self.policy, "model", None), "wide_buckets", 0) or 0)
        if not buckets or self.numpy is None:
            return None
        from worker.features.wide import wide_terms

        reading = self.numpy.net.wide_reading
        terms = [wide_terms(r.state, list(r.tools), buckets, reading) for r in rows]
        return self.numpy.net.wide_logits(terms, widest)

    def _torch(
        self, scaled: np.ndarray, counts: list[int], wide: np.ndarray | None = None
    ) -> np.ndarray:
        """`TrmPolicy.scores_batch`'s forward: `SCORE_ROWS` rows at a time, each chunk padded to
        its widest row."""
        import torch

        from worker.models.trm import SCORE_ROWS

        policy: Any = self.policy
        widest = max(counts)
        out = np.full((len(counts), widest), PAD_SCORE, dtype=np.float32)
        starts = np.cumsum([0, *counts])
        for first in range(0, len(counts), SCORE_ROWS):
            chunk = counts[first : first + SCORE_ROWS]
            block = scaled[starts[first] : starts[first + len(chunk)]]
            x, mask = pad_stacked(block, chunk)
            given = None
            if wide is not None:
                block_wide = wide[first : first + len(chunk), : mask.shape[1]]
                given = torch.from_numpy(np.ascontiguousarray(block_wide)).to(policy.device)
            final = policy.model.infer(
                torch.from_numpy(x).to(policy.device),
                torch.from_numpy(mask).to(policy.device),
                policy.steps,
                given,
            ).cpu()
            out[first : first + len(chunk), : final.shape[1]] = final.numpy()
        return out


def split_columns(booster: Any) -> list[int] | None:
    """The columns a LightGBM model's trees split on, over all its trees: the only ones its
    predictions read. None for linear trees (their leaves read other columns too)."""
    found: set[int] = set()
    nodes = [tree["tree_structure"] for tree in booster.dump_model()["tree_info"]]
    while nodes:
        node = nodes.pop()
        if "leaf_features" in node:
            return None
        if "split_feature" in node:
            found.add(int(node["split_feature"]))
            nodes += [node["left_child"], node["right_child"]]
    return sorted(found)


def lm_note(policy: Any) -> str:
    """What a qlora controller's answers say of themselves: it decides, slowly."""
    device = getattr(getattr(policy, "model", None), "device", None)
    where = "a GPU" if getattr(device, "type", "cpu") == "cuda" else "the CPU"
    return (
        f"slow: a qlora controller scores every candidate with its language model on {where} "
        "(one forward of the LM a candidate; a trm or a gbdt decides a row in about a "
        "millisecond)"
    )


class NumpyForward:
    """A trm policy's network run by `numpy_trm.NumpyTrm` on the policy's weights: the same
    recursion as `TrmPolicy.scores_batch` on the same padded batch."""

    def __init__(self, net: NumpyTrm) -> None:
        self.net = net

    @classmethod
    def of(cls, policy: Any) -> NumpyForward | None:
        """None for a network the port does not run (a layer it does not know): torch runs it."""
        model = policy.model
        weights = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
        try:
            net = NumpyTrm(
                weights, model.n, model.cycles, policy.steps, torch_gelu(), model.wide_reading
            )
            return cls(net)
        except ValueError:
            return None


def torch_gelu() -> Activation:
    """The numpy forward's GELU in the service: torch's own (the trained model's, vectorised)
    on arrays of `TORCH_GELU_FROM` values or more, scipy's erf below, where a torch call's fixed
    cost is more than the work. At 64 rows a call (64 x 4 candidates x 128) torch's took 33 us
    against 294; at one row 9.4 against 6.0. The two differ by under 1e-6."""
    import torch
    from torch.nn.functional import gelu as torch_gelu_op

    ready = threading.local()

    def act(x: np.ndarray) -> np.ndarray:
        if x.size < TORCH_GELU_FROM:
            return gelu(x)
        if not getattr(ready, "threads", False):
            # OpenMP's thread count is each thread's own: in a thread new to torch (the
            # decision process decides in worker threads) it starts at the CPU's cores whatever
            # torch was set to, and its waiting threads spin: a 50-row forward took 100 ms of
            # CPU there against 3.5 in the thread that set it.
            torch.set_num_threads(torch.get_num_threads())
            ready.threads = True
        out: np.ndarray = torch_gelu_op(torch.from_numpy(x)).numpy()
        return out

    return act


def pad_stacked(scaled: np.ndarray, counts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Rows stacked candidate after candidate ((sum of counts, width)) as one (rows, widest,
    width) batch and its mask, as `numpy_trm.pad` and `Encoded.batch` pad them."""
    widest = max(counts)
    if all(n == widest for n in counts):  # no padding: a reshape
        x = scaled.reshape(len(counts), widest, scaled.shape[1])
        return x, np.ones((len(counts), widest), dtype=bool)
    x = np.zeros((len(counts), widest, scaled.shape[1]), dtype=np.float32)
    mask = np.zeros((len(counts), widest), dtype=bool)
    start = 0
    for i, n in enumerate(counts):
        x[i, :n] = scaled[start : start + n]
        mask[i, :n] = True
        start += n
    return x, mask


def load_controller(
    trainer_dir: Path, trainer: str, abstain_margin: float | None = None
) -> Controller:
    """The model a train run left in `trainer_dir` (`<run>/trainer/`) as a controller, on the CPU
    for a trm. Missing or outdated files are the loaders' `dependency` StageFailure naming them;
    an unknown trainer is a ValueError."""
    trainer_dir = Path(trainer_dir)
    ref: dict[str, Any]
    if trainer in ("trm", "gbdt"):
        ref = {"type": trainer, "path": str(trainer_dir)}
    elif trainer == "qlora":
        meta = trainer_dir / RUN_META
        contract = json.loads(meta.read_text()).get("contract") if meta.is_file() else None
        ref = {
            "type": "qlora",
            "path": str(trainer_dir / ADAPTER),
            "contract": contract or "action_only",
        }
    else:
        raise ValueError(f"trainer: {trainer!r} is not one of {', '.join(TRAINERS)}")
    return Controller(load_policy(ref), trainer, abstain_margin)


def check_rows(rows: Sequence[DecideRow]) -> None:
    """`RowError` for the first row the controller cannot read."""
    if len(rows) > MAX_ROWS:
        raise RowError("rows", f"{len(rows)} rows, at most {MAX_ROWS} per call")
    for i, row in enumerate(rows):
        where = f"rows[{i}]"
        if not isinstance(row.state, str):
            raise RowError(f"{where}.state", "not a string (serialize a JSON object first)")
        if len(row.state) > MAX_STATE_CHARS:
            raise RowError(
                f"{where}.state", f"{len(row.state)} characters, at most {MAX_STATE_CHARS}"
            )
        tools = row.tools
        if not isinstance(tools, list | tuple) or not tools:
            raise RowError(f"{where}.tools", "no candidate tools (at least one is needed)")
        if len(tools) > MAX_TOOLS:
            raise RowError(f"{where}.tools", f"{len(tools)} candidates, at most {MAX_TOOLS}")
        seen: set[str] = set()
        for k, tool in enumerate(tools):
            if not isinstance(tool, str) or not tool:
                raise RowError(f"{where}.tools[{k}]", "not a non-empty string")
            if len(tool) > MAX_TOOL_CHARS:
                raise RowError(
                    f"{where}.tools[{k}]", f"{len(tool)} characters, at most {MAX_TOOL_CHARS}"
                )
            if tool in seen:
                raise RowError(f"{where}.tools[{k}]", f"{tool!r} is offered twice")
            seen.add(tool)
