"""Mazes: a square grid with walls at a random share of its cells, a start and a goal; the
answer is the same grid with the shortest start-goal path marked. A BFS oracle solves and checks.

Tokens (one per cell, row by row): `OPEN`, `WALL`, `START`, `GOAL`, and in an answer `PATH` on
the cells between start and goal. Moves are the four neighbours.

`generate(rng, side, wall_share, min_path, style)` draws walls and the two ends until the
shortest path is at least `min_path` moves long and is the only path of that length, so the
answer is one grid and exact-answer accuracy is well defined. Two ways to draw the walls:

- `random`: each cell a wall with probability `wall_share` (long paths are rare past ~12x12);
- `carved`: a random depth-first maze carved on the even cells, then walls knocked out at random
  until `wall_share` of the cells are walls (loops, so a wrong turn is not a dead end only):
  how 30x30 mazes with paths over 110 moves (the paper's Maze-Hard) are found in a few draws.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Literal

Style = Literal["random", "carved"]

OPEN, WALL, START, GOAL, PATH = 0, 1, 2, 3, 4
VOCAB = 5
STARTS_PER_DRAW = 8  # starts tried on one drawn wall layout before drawing another
SYMBOLS = {OPEN: ".", WALL: "#", START: "S", GOAL: "G", PATH: "o"}


def _neighbours(cell: int, side: int) -> list[int]:
    r, c = divmod(cell, side)
    out = []
    if r > 0:
        out.append(cell - side)
    if r < side - 1:
        out.append(cell + side)
    if c > 0:
        out.append(cell - 1)
    if c < side - 1:
        out.append(cell + 1)
    return out


def distances(grid: tuple[int, ...] | list[int], side: int, source: int) -> list[int]:
    """Moves from `source` to every cell over non-wall cells; -1 where unreachable."""
    dist = [-1] * len(grid)
    dist[source] = 0
    queue = deque([source])
    while queue:
        cell = queue.popleft()
        for nxt in _neighbours(cell, side):
            if grid[nxt] != WALL and dist[nxt] < 0:
                dist[nxt] = dist[cell] + 1
                queue.append(nxt)
    return dist


def _ways(grid: tuple[int, ...] | list[int], side: int, start: int) -> tuple[list[int], list[int]]:
    """(moves from `start` to each cell, -1 where unreachable; shortest paths to it, up to 2)."""
    dist = distances(grid, side, start)
    ways = [0] * len(grid)
    ways[start] = 1
    for cell in sorted((c for c in range(len(grid)) if dist[c] >= 0), key=dist.__getitem__):
        for nxt in _neighbours(cell, side):
            if dist[nxt] == dist[cell] + 1:
                ways[nxt] = min(2, ways[nxt] + ways[cell])
    return dist, ways


def shortest_paths(grid: tuple[int, ...] | list[int], side: int) -> tuple[int, int]:
    """(length of the shortest start-goal path in moves, how many such paths, counted up to 2);
    (-1, 0) when the goal is unreachable."""
    goal = grid.index(GOAL)
    dist, ways = _ways(grid, side, grid.index(START))
    return (dist[goal], ways[goal]) if dist[goal] >= 0 else (-1, 0)


def solve(grid: tuple[int, ...] | list[int], side: int) -> tuple[int, ...] | None:
    """The grid with one shortest path marked (walking back from the goal), or None."""
    start, goal = grid.index(START), grid.index(GOAL)
    dist = distances(grid, side, start)
    if dist[goal] < 0:
        return None
    answer = list(grid)
    cell = goal
    while dist[cell] > 1:
        cell = next(n for n in _neighbours(cell, side) if dist[n] == dist[cell] - 1)
        answer[cell] = PATH
    return tuple(answer)


def is_solution(
    puzzle: tuple[int, ...] | list[int], answer: tuple[int, ...] | list[int], side: int
) -> bool:
    """Whether `answer` is `puzzle` with a shortest start-goal path marked: every other cell
    unchanged, the marked cells plus the ends a 4-connected chain of the shortest length."""
    if len(answer) != len(puzzle) or len(puzzle) != side * side:
        return False
    for p, a in zip(puzzle, answer, strict=True):
        if a != p and not (p == OPEN and a == PATH):
            return False
    length, _ = shortest_paths(puzzle, side)
    marked = [c for c, a in enumerate(answer) if a == PATH]
    if length < 0 or len(marked) != length - 1:
        return False
    # The ends and the marks must chain: a walk over them from start reaches goal in `length`.
    allowed = [a in (PATH, START, GOAL) for a in answer]
    walk = [WALL if not ok else OPEN for ok in allowed]
    walk[puzzle.index(START)], walk[puzzle.index(GOAL)] = START, GOAL
    reach = distances(walk, side, puzzle.index(START))
    return reach[puzzle.index(GOAL)] == length


def _carved(rng: random.Random, side: int, wall_share: float) -> list[int]:
    """A depth-first maze over the cells at even (row, column), walls between, then random
    walls opened until at most `wall_share` of the cells are walls."""
    grid = [WALL] * (side * side)
    rooms = (side + 1) // 2
    span = 2 * rooms - 1
    first = 0
    grid[first] = OPEN
    stack = [first]
    while stack:
        cell = stack[-1]
        r, c = divmod(cell, side)
        steps = [
            (dr, dc)
            for dr, dc in ((-2, 0), (2, 0), (0, -2), (0, 2))
            if 0 <= r + dr < span and 0 <= c + dc < span and grid[(r + dr) * side + c + dc] == WALL
        ]
        if not steps:
            stack.pop()
            continue
        dr, dc = rng.choice(steps)
        grid[(r + dr // 2) * side + c + dc // 2] = OPEN
        grid[(r + dr) * side + c + dc] = OPEN
        stack.append((r + dr) * side + c + dc)
    # Only walls between two rooms (one coordinate odd, inside the rooms' span): opening a pillar
    # makes a 2x2 open square, and with it two equally short ways round.
    walls = [
        c
        for c in range(side * side)
        if grid[c] == WALL and c // side < span and c % side < span and (c // side + c % side) % 2
    ]
    rng.shuffle(walls)
    extra = sum(g == WALL for g in grid) - int(wall_share * side * side)
    for cell in walls[: max(0, extra)]:
        grid[cell] = OPEN
    return grid


def generate(
    rng: random.Random,
    side: int,
    wall_share: float,
    min_path: int,
    style: Style = "random",
    tries: int = 20000,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(maze, answer) with a unique shortest path of at least `min_path` moves; ValueError after
    `tries` draws without one."""
    cells = side * side
    for _ in range(tries):
        if style == "carved":
            grid = _carved(rng, side, wall_share)
        else:
            grid = [WALL if rng.random() < wall_share else OPEN for _ in range(cells)]
        opens = [c for c in range(cells) if grid[c] == OPEN]
        if len(opens) < min_path + 1:
            continue
        for start in rng.sample(opens, min(len(opens), STARTS_PER_DRAW)):
            dist, ways = _ways(grid, side, start)
            goals = [c for c in range(cells) if dist[c] >= min_path and ways[c] == 1]
            if goals:
                grid[start], grid[rng.choice(goals)] = START, GOAL
                answer = solve(grid, side)
                assert answer is not None
                return tuple(grid), answer
    raise ValueError(
        f"no {side}x{side} maze with wall share {wall_share} and a unique shortest path of "
        f">= {min_path} moves in {tries} draws"
    )


def render(grid: tuple[int, ...] | list[int], side: int) -> str:
    return "\n".join(
        "".join(SYMBOLS[t] for t in grid[r * side : (r + 1) * side]) for r in range(side)
    )
