"""The whole-answer trm: gradients only through the last cycle, a tiny maze set learned to 1.0,
halting early on puzzles it has learned, and its files round-trip."""

from __future__ import annotations

import pytest
import torch

from core.schemas.puzzles import GridTrainerConfig
from worker.models.trm_grid import GridTRM, load_model, save_model
from worker.puzzles import MazeParams, PuzzleSet, generate_set
from worker.train.callbacks import TrainerCallbacks
from worker.train.trm_grid import score, train

TINY = GridTrainerConfig(hidden=16, batch_size=4, n_recursions=3, cycles=3, supervision_steps=2)


def _calls_with_grad(model: GridTRM) -> list[bool]:
    """Whether gradients were recorded, per application of the network."""
    seen: list[bool] = []
    model.blocks[0].register_forward_hook(lambda *_: seen.append(torch.is_grad_enabled()))
    return seen


@pytest.mark.parametrize("gradient,recorded", [("full", 4), ("one_step", 2)])
def test_gradients_flow_only_through_the_last_cycle(gradient: str, recorded: int) -> None:
    model = GridTRM(TINY.model_copy(update={"gradient": gradient}), vocab=5, cells=9)
    seen = _calls_with_grad(model)
    x = model.embed(torch.randint(0, 5, (2, 9)))
    y, z = model.start(x)
    y.requires_grad_(True)  # the carry coming in: it passes through the gradient-free cycles
    _, _, logits, q = model.deep_recursion(x, y, z)
    (logits.sum() + q.sum()).backward()
    # T = 3 cycles of n + 1 = 4 calls; only the last cycle's (or its last 2) record gradients.
    assert seen == [False] * (12 - recorded) + [True] * recorded
    assert y.grad is None
    assert model.tokens.weight.grad is not None and model.tokens.weight.grad.abs().sum() > 0


def _reach(config: GridTrainerConfig, side: int = 11) -> int:
    """How far (in king moves) a change to the top-left cell moves the answer's logits."""
    torch.manual_seed(0)
    model = GridTRM(config, vocab=5, cells=side * side).eval()
    grid = torch.zeros(1, side * side, dtype=torch.long)
    changed = grid.clone()
    changed[0, 0] = 1
    with torch.no_grad():
        a, b = (model.deep_recursion(*_fresh(model, g))[2][0] for g in (grid, changed))
    moved = ((a - b).abs().amax(-1) > 1e-6).nonzero().flatten().tolist()
    return max(max(divmod(cell, side)) for cell in moved)


def _fresh(model: GridTRM, grid: torch.Tensor) -> tuple[torch.Tensor, ...]:
    x = model.embed(grid)
    return (x, *model.start(x))


def test_the_conv_mixer_moves_information_one_cell_a_block() -> None:
    one_step = GridTrainerConfig(
        hidden=16, mixer="conv", n_recursions=1, cycles=1, supervision_steps=1
    )
    # Two passes of the 2-block network (z, then y): four cells, no further.
    assert _reach(one_step) == 4
    # n = 3, T = 2: (3 + 1) x 2 passes, 16 cells, so the far corner (10 away) hears of it.
    assert _reach(one_step.model_copy(update={"n_recursions": 3, "cycles": 2})) == 10


def test_with_one_cycle_the_carry_gets_gradients() -> None:
    model = GridTRM(TINY.model_copy(update={"cycles": 1}), vocab=5, cells=9)
    x = model.embed(torch.randint(0, 5, (2, 9)))
    y, z = model.start(x)
    y.requires_grad_(True)
    model.deep_recursion(x, y, z)[2].sum().backward()
    assert y.grad is not None and y.grad.abs().sum() > 0


@pytest.fixture(scope="module")
def tiny_mazes() -> PuzzleSet:
    return generate_set("maze", MazeParams(5, 0.3, 5, "random"), 12, seed=3)


@pytest.fixture(scope="module")
def trained(tiny_mazes: PuzzleSet) -> GridTRM:
    torch.set_num_threads(1)
    sizes = {"hidden": 32, "batch_size": 12, "n_recursions": 2, "cycles": 2}
    config = GridTrainerConfig(
        **sizes,
        supervision_steps=4,
        max_steps=300,
        lr=3e-3,
        warmup_steps=10,
        ema_decay=0.9,
        eval_every=50,
        augment=False,
        halt_exploration=0.0,
    )
    model, result = train(config, tiny_mazes, tiny_mazes, TrainerCallbacks(), seed=0)
    assert result.val is not None
    return model


def test_a_tiny_maze_set_is_solved_exactly(trained: GridTRM, tiny_mazes: PuzzleSet) -> None:
    assert score(trained, tiny_mazes).exact == 1.0


def test_halting_stops_early_on_a_learned_set(trained: GridTRM, tiny_mazes: PuzzleSet) -> None:
    halted = score(trained, tiny_mazes, halting=True)
    assert halted.exact == 1.0
    assert halted.steps < trained.config.supervision_steps / 2


def test_a_saved_model_answers_the_same(trained: GridTRM, tiny_mazes: PuzzleSet, tmp_path) -> None:
    save_model(tmp_path, trained, {"family": "maze"})
    back = load_model(tmp_path)
    grid = torch.from_numpy(tiny_mazes.inputs)
    assert torch.equal(back.solve(grid)[0], trained.solve(grid)[0])


class StopAt(TrainerCallbacks):
    """Asks the trainer to stop once `at` steps are done (a cancel, as the service sends it)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def should_stop(self) -> str | None:
        return "cancelled" if self.steps and self.steps[-1]["step"] >= self.at else None


def test_a_stopped_run_resumes_to_the_same_model(tiny_mazes: PuzzleSet, tmp_path) -> None:
    config = TINY.model_copy(update={"max_steps": 12, "checkpoint_every": 5, "eval_every": 4})
    whole, whole_result = train(config, tiny_mazes, tiny_mazes, TrainerCallbacks(), seed=1)
    _, stopped = train(config, tiny_mazes, tiny_mazes, StopAt(7), seed=1, out_dir=tmp_path)
    assert stopped.stopped_by == "cancelled" and stopped.steps == 7
    again, resumed = train(
        config, tiny_mazes, tiny_mazes, TrainerCallbacks(), seed=1, out_dir=tmp_path
    )
    assert resumed.steps == 12 and [p.step for p in resumed.curve] == [4, 8, 12]
    for key, value in whole.state_dict().items():
        assert torch.equal(value, again.state_dict()[key]), key
    assert [p.exact for p in resumed.curve] == [p.exact for p in whole_result.curve]
