"""`grid`: walk to a goal on a walled map, fetching keys for locked doors, within a step budget.

Map cells: `.` floor, `#` wall, `A`/`B` doors (need key `a`/`b`), `a`/`b` keys (picked up on
entry, kept), `~` pit (entering it loses the episode). Walls, the map edge and locked doors are
invalid moves; a pit, or a move that leaves fewer steps than the shortest way to the goal, is a
dead end. The step budget is the shortest path plus the world's slack, so a detour is survivable
only while slack lasts.
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from dataclasses import dataclass
from typing import Any

from worker.envs.base import World, pick_style, seeded_rng

MOVES = {"north": (0, -1), "south": (0, 1), "east": (1, 0), "west": (-1, 0)}
TAGS = ["move:north", "move:south", "move:east", "move:west", "wait"]
STYLES = [
    dict(zip(TAGS, ["move_n", "move_s", "move_e", "move_w", "stay"], strict=True)),
    dict(zip(TAGS, ["go_north", "go_south", "go_east", "go_west", "wait"], strict=True)),
    dict(zip(TAGS, ["N", "S", "E", "W", "Z"], strict=True)),
    dict(zip(TAGS, ["up", "down", "right", "left", "noop"], strict=True)),
    dict(zip(TAGS, ["k", "j", "l", "h", "x"], strict=True)),
]
Pos = tuple[int, int]


@dataclass(frozen=True, slots=True)
class GridState:
    pos: Pos
    goal: Pos
    keys: str  # the keys held, sorted
    steps_left: int
    fell: bool = False


class GridWorld(World):
    family = "grid"

    def __init__(
        self,
        world_id: str,
        rows: list[str],
        *,
        starts: list[Pos],
        goals: list[Pos],
        slack: int,
        style: dict[str, str],
        order: list[str],
    ):
        self.rows = rows
        self.width, self.height = len(rows[0]), len(rows)
        self.starts, self.goals, self.slack = starts, goals, slack
        self.key_letters = "".join(sorted({c for row in rows for c in row if c in "ab"}))
        self._move_of = {style[tag]: MOVES.get(tag.split(":")[-1]) for tag in order}
        tags = {style[tag]: tag for tag in order}
        params = {"rows": rows, "starts": starts, "goals": goals, "slack": slack}
        super().__init__(world_id, tags, params)
        self._dist: dict[Pos, dict[tuple[Pos, str], int]] = {}

    # ---- building ------------------------------------------------------------------------
    @classmethod
    def from_rows(
        cls, world_id: str, rows: list[str], *, slack: int = 0, style: int = 0, wait: bool = False
    ) -> GridWorld:
        """A hand-drawn world: `S` marks the start, `G` the goal (both become floor)."""
        starts = [(x, y) for y, row in enumerate(rows) for x, c in enumerate(row) if c == "S"]
        goals = [(x, y) for y, row in enumerate(rows) for x, c in enumerate(row) if c == "G"]
        clean = [row.replace("S", ".").replace("G", ".") for row in rows]
        order = TAGS if wait else TAGS[:4]
        return cls(
            world_id,
            clean,
            starts=starts,
            goals=goals,
            slack=slack,
            style=STYLES[style],
            order=list(order),
        )

    @classmethod
    def generate(cls, world_id: str, rng: random.Random) -> GridWorld:
        style = pick_style(rng, STYLES)
        order = TAGS[:4]
        rng.shuffle(order)
        if rng.random() < 0.4:
            order = [*order, "wait"]
        slack = rng.randint(0, 4)
        for _attempt in range(200):
            rows, starts, goals = _draw_layout(rng)
            world = cls(
                world_id, rows, starts=starts, goals=goals, slack=slack, style=style, order=order
            )
            pairs = sum(
                1 for s in starts for g in goals[:4] if world._distance(g).get((s, "")) is not None
            )
            if pairs >= 3:
                return world
        raise RuntimeError(f"{world_id}: no solvable layout drawn")  # pragma: no cover

    # ---- mechanics -----------------------------------------------------------------------
    def cell(self, pos: Pos) -> str:
        x, y = pos
        if 0 <= x < self.width and 0 <= y < self.height:
            return self.rows[y][x]
        return "#"

    def reset(self, episode: int | str) -> GridState:
        rng = seeded_rng(self.world_id, "episode", episode)
        for _attempt in range(500):
            start, goal = rng.choice(self.starts), rng.choice(self.goals)
            dist = self._distance(goal).get((start, ""))
            if dist is not None and start != goal:
                return GridState(start, goal, "", dist + self.slack)
        raise RuntimeError(f"{self.world_id}: no solvable start")  # pragma: no cover

    def candidates(self, state: GridState) -> list[str]:
        return list(self.action_tags)

    def why_invalid(self, state: GridState, action: str) -> str | None:
        move = self._move_of[action]
        if move is None:
            return None
        target = (state.pos[0] + move[0], state.pos[1] + move[1])
        cell = self.cell(target)
        if cell == "#":
            return (
                "wall" if 0 <= target[0] < self.width and 0 <= target[1] < self.height else "edge"
            )
        if cell in "AB" and cell.lower() not in state.keys:
            return f"door {cell} is locked"
        return None

    def transition(self, state: GridState, action: str) -> GridState:
        move = self._move_of[action]
        pos = state.pos if move is None else (state.pos[0] + move[0], state.pos[1] + move[1])
        cell = self.cell(pos)
        keys = state.keys
        if cell in "ab" and cell not in keys:
            keys = "".join(sorted(keys + cell))
        return GridState(pos, state.goal, keys, state.steps_left - 1, fell=cell == "~")

    def step_cost(self, state: GridState, action: str) -> float:
        return 1.0

    def cost_to_go(self, state: GridState) -> float | None:
        if state.fell:
            return None
        dist = self._distance(state.goal).get((state.pos, state.keys))
        if dist is None or dist > state.steps_left:
            return None
        return float(dist)

    def is_success(self, state: GridState) -> bool:
        return state.pos == state.goal and not state.fell

    def observe(self, state: GridState) -> dict[str, Any]:
        return {
            "map": self.rows,
            "pos": list(state.pos),
            "goal": list(state.goal),
            "keys": state.keys,
            "steps_left": state.steps_left,
        }

    def _distance(self, goal: Pos) -> dict[tuple[Pos, str], int]:
        """Shortest number of moves from every (cell, keys held) to `goal`, by backward BFS."""
        table = self._dist.get(goal)
        if table is not None:
            return table
        keysets = [
            "".join(combo)
            for n in range(len(self.key_letters) + 1)
            for combo in itertools.combinations(self.key_letters, n)
        ]
        backward: dict[tuple[Pos, str], list[tuple[Pos, str]]] = {}
        for y, x, keys in itertools.product(range(self.height), range(self.width), keysets):
            if self.cell((x, y)) in "#~":
                continue
            for dx, dy in MOVES.values():
                nxt = (x + dx, y + dy)
                cell = self.cell(nxt)
                if cell in "#~" or (cell in "AB" and cell.lower() not in keys):
                    continue
                nkeys = "".join(sorted(keys + cell)) if cell in "ab" and cell not in keys else keys
                backward.setdefault((nxt, nkeys), []).append(((x, y), keys))
        table = {(goal, keys): 0 for keys in keysets}
        queue = deque(table)
        while queue:
            node = queue.popleft()
            for prev in backward.get(node, ()):
                if prev not in table:
                    table[prev] = table[node] + 1
                    queue.append(prev)
        self._dist[goal] = table
        return table


def _draw_layout(rng: random.Random) -> tuple[list[str], list[Pos], list[Pos]]:
    """Bands separated by wall columns with one door each; keys behind the doors they open."""
    width, height = rng.randint(5, 9), rng.randint(5, 8)
    doors = rng.choice([0, 1, 1, 2]) if width >= 7 else rng.choice([0, 1])
    grid = [["."] * width for _ in range(height)]
    columns = [round((k + 1) * width / (doors + 1)) - (1 if doors else 0) for k in range(doors)]
    bands: list[list[int]] = []
    edges = [-1, *columns, width]
    for left, right in itertools.pairwise(edges):
        bands.append(list(range(left + 1, right)))
    for k, col in enumerate(columns):
        for y in range(height):
            grid[y][col] = "#"
        grid[rng.randrange(height)][col] = "AB"[k]
    free = {(x, y) for x in range(width) for y in range(height) if grid[y][x] == "."}

    def place(band: list[int], char: str) -> None:
        spots = sorted(p for p in free if p[0] in band)
        if not spots:
            return
        spot = rng.choice(spots)
        grid[spot[1]][spot[0]] = char
        free.discard(spot)

    for k in range(doors):
        place(bands[rng.randint(0, k)], "ab"[k])
    for spot in sorted(free):
        if rng.random() < 0.12:
            grid[spot[1]][spot[0]] = "#"
            free.discard(spot)
    for _ in range(rng.randint(0, 3)):
        place(bands[rng.randrange(len(bands))], "~")
    starts = sorted(p for p in free if p[0] in bands[0])
    goals = sorted(p for p in free if p[0] in bands[-1])
    rng.shuffle(goals)
    return ["".join(row) for row in grid], starts, goals
