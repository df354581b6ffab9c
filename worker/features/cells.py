"""Cells in a state (SPEC §6): a list of equal-length lines read as a grid, around its positions.

A **grid** is a context list of at least two lines of one length, without spaces, of a few
distinct symbols, one of them a background (`["..#.", ".a.~"]`: a map). A set of its lines says
nothing of the layout, so it is read around its **anchors**: each symbol that occurs once (`=A`:
the one cell holding `A`) and each pair of whole numbers of the context that falls inside it
(`pos = [x, y]`: column x, row y; when the pair also fits as row, column, that reading too, as
`<pair>~yx`). For each anchor, `WIN:<grid>@<anchor>:<dx>,<dy>:<symbol>` says which symbol lies
`dx` columns and `dy` rows away (`out` past the edge), up to `RADIUS` cells in each direction:
the walls and doors around an agent.

A **move** is a candidate whose id names a direction (`DIRECTIONS`: `move:north`, `go_left`,
`up`; x grows to the east and the right, y to the south and down, as rows are listed). What a
cell in a window says of a move takes the reader a cell and a candidate at once; a move's own
features say it directly, per candidate, for each anchor it would move: `GO:<grid>@<anchor>:
<dx>,<dy>:<symbol>` the symbol around the cell it enters, in the move's own frame (`0,0` the cell
entered, `0,1` the one past it, `1,0` the one to its right; so `GO:map@pos:0,0:#`, walking into
a wall, is one name for every direction), `GOD:<grid>@<anchor>|<other>` how much nearer (-1) or
farther (+1) in steps the move takes the anchor to another anchor (the goal), and
`GOHAS:<grid>@<anchor>|<c>` whether the symbol entered is in the context string or list `c`
(a door whose key is held).

A **walk** is a context list of moves (a proposed plan: `["move_w", "move_s"]`, each item's
direction named by itself or by the context string it keys, `tags.move_w = "move:west"`),
followed on each grid from each anchor: `WALK:<grid>@<anchor>|<list>:<symbol>` how many of its
steps enter `symbol` (a wall, a pit, `out` past the edge), `WALKD:<grid>@<anchor>|<list>|<other>`
how many steps from another anchor it ends (0: it arrives at the goal). Context, like `WIN:`.

A **line of cells** aligned with a candidate (`busy.oven = "..#.."`: a machine's time slots) is
read at the candidate's own id numbers: `AT:<line>|<k>:<symbol>` the symbol at its k-th number,
`RUN:<line>|<k>:<symbol>` how many cells from there hold it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from worker.features.kinds import Features, name

RADIUS = 2  # cells read in each direction from an anchor
MAX_SYMBOLS = 12  # a grid has at most this many distinct symbols
MAX_CELLS = 4096  # larger grids are not read
MAX_ANCHORS = 6  # anchors read per grid
MAX_CELL_SYMBOLS = 4  # a line of cells has at most this many distinct symbols
OUT = "out"  # the symbol past a grid's edge
MOVE_RADIUS = 1  # cells read around the cell a move enters
# Words naming a direction in a candidate's id, as (columns, rows) a move goes.
DIRECTIONS = {
    "north": (0, -1),
    "up": (0, -1),
    "south": (0, 1),
    "down": (0, 1),
    "east": (1, 0),
    "right": (1, 0),
    "west": (-1, 0),
    "left": (-1, 0),
}
_LETTERS = re.compile(r"[a-z]+")


@dataclass(frozen=True)
class Grid:
    """A list of lines read as a grid (a leaf value beside numbers, strings and sets)."""

    rows: tuple[str, ...]


def is_grid(items: list[str]) -> bool:
    """Lines of one length, mostly one background symbol, with a mark that is not a letter or a
    digit or only a very few symbols: a map, not a list of ids (`["op1", "op3"]`, `["cpu0:3",
    "cpu1:4"]`)."""
    if len(items) < 2:
        return False
    width = len(items[0])
    if width < 3 or any(len(row) != width for row in items) or width * len(items) > MAX_CELLS:
        return False
    counts = Counter("".join(items))
    if len(counts) > MAX_SYMBOLS or any(c.isspace() for c in counts):
        return False
    marked = any(not c.isalnum() for c in counts) or len(counts) <= 3
    return marked and 3 * max(counts.values()) >= width * len(items)


def window_features(
    grids: list[tuple[str, Grid]], pairs: list[tuple[str, list[float]]]
) -> Features:
    """`WIN:` of every grid around each of its anchors (the same for every candidate)."""
    out: Features = {}
    for path, grid in grids:
        for anchor, (x, y) in _anchors(grid, pairs)[:MAX_ANCHORS]:
            for dy in range(-RADIUS, RADIUS + 1):
                for dx in range(-RADIUS, RADIUS + 1):
                    out[name("WIN", path, anchor, dx, dy, _at(grid, x + dx, y + dy))] = 1.0
    return out


def direction_of(tool: str) -> tuple[int, int] | None:
    """The (columns, rows) a candidate moves: the sum of the directions its id's words name
    (`move:north` (0, -1), `north_east` (1, -1)), or None when it names none (or they cancel)."""
    words = set(_LETTERS.findall(tool.lower()))
    dx = sum(DIRECTIONS[w][0] for w in words if w in DIRECTIONS)
    dy = sum(DIRECTIONS[w][1] for w in words if w in DIRECTIONS)
    return (dx, dy) if (dx, dy) != (0, 0) else None


def move_features(
    grids: list[tuple[str, Grid]],
    pairs: list[tuple[str, list[float]]],
    strings: list[tuple[str, frozenset[str] | str]],
    tools: list[str],
) -> list[Features]:
    """`GO:`, `GOD:` and `GOHAS:` of each candidate that is a move (empty for the others): the
    cells around the one it enters, from each anchor of each grid (see the module's docstring)."""
    moves = [direction_of(t) for t in tools]
    out: list[Features] = [{} for _ in tools]
    if not any(moves):
        return out
    for path, grid in grids:
        anchors = _anchors(grid, pairs)[:MAX_ANCHORS]
        for anchor, (x, y) in anchors:
            for f, move in zip(out, moves, strict=True):
                if move is None:
                    continue
                mx, my = move
                tx, ty = x + mx, y + my
                # The move's frame: ahead along (mx, my), right along (-my, mx).
                for ahead in range(-MOVE_RADIUS, MOVE_RADIUS + 1):
                    for right in range(-MOVE_RADIUS, MOVE_RADIUS + 1):
                        cx, cy = tx + ahead * mx - right * my, ty + ahead * my + right * mx
                        f[name("GO", path, anchor, right, ahead, _at(grid, cx, cy))] = 1.0
                entered = _at(grid, tx, ty)
                if entered.isalnum():
                    for cpath, value in strings:
                        if len(value) > MAX_SYMBOLS:
                            continue
                        if entered.lower() in value:
                            f[name("GOHAS", path, anchor, cpath)] = 1.0
                base = anchor.removesuffix("~yx")
                for other, (ox, oy) in anchors:
                    if other.removesuffix("~yx") != base:
                        before = abs(ox - x) + abs(oy - y)
                        f[name("GOD", path, anchor, other)] = float(
                            abs(ox - tx) + abs(oy - ty) - before
                        )
    return out


def walk_features(
    grids: list[tuple[str, Grid]],
    pairs: list[tuple[str, list[float]]],
    lists: list[tuple[str, tuple[str, ...]]],
    strings: list[tuple[str, str]],
) -> Features:
    """`WALK:` and `WALKD:` of each context list of moves on each grid (see the module's
    docstring): the same for every candidate."""
    out: Features = {}
    if not grids:
        return out
    keyed = {path.rpartition(".")[2].lower(): value for path, value in strings}
    walks: list[tuple[str, list[tuple[int, int]]]] = []
    for path, items in lists:
        found = [direction_of(item) or direction_of(keyed.get(item, "")) for item in items]
        if found and 2 * sum(s is not None for s in found) >= len(found):
            walks.append((path, [s or (0, 0) for s in found]))
    for gpath, grid in grids:
        anchors = _anchors(grid, pairs)[:MAX_ANCHORS]
        for lpath, steps in walks:
            for anchor, (x, y) in anchors:
                entered: Counter[str] = Counter()
                for mx, my in steps:
                    x, y = x + mx, y + my
                    entered[_at(grid, x, y)] += 1
                for symbol, count in entered.items():
                    out[name("WALK", gpath, anchor, lpath, symbol)] = float(count)
                base = anchor.removesuffix("~yx")
                for other, (ox, oy) in anchors:
                    if other.removesuffix("~yx") != base:
                        out[name("WALKD", gpath, anchor, lpath, other)] = float(
                            abs(ox - x) + abs(oy - y)
                        )
    return out


def _anchors(grid: Grid, pairs: list[tuple[str, list[float]]]) -> list[tuple[str, tuple[int, int]]]:
    height, width = len(grid.rows), len(grid.rows[0])
    found: list[tuple[str, tuple[int, int]]] = []
    for path, numbers in pairs:
        if len(numbers) != 2 or not all(float(v).is_integer() for v in numbers):
            continue
        a, b = int(numbers[0]), int(numbers[1])
        if 0 <= a < width and 0 <= b < height:
            found.append((path, (a, b)))
        if a != b and 0 <= b < width and 0 <= a < height:
            found.append((f"{path}~yx", (b, a)))
    seen: dict[str, list[tuple[int, int]]] = {}
    for y, row in enumerate(grid.rows):
        for x, symbol in enumerate(row):
            seen.setdefault(symbol, []).append((x, y))
    found += [(f"={s}", cells[0]) for s, cells in sorted(seen.items()) if len(cells) == 1]
    return found


def _at(grid: Grid, x: int, y: int) -> str:
    if 0 <= y < len(grid.rows) and 0 <= x < len(grid.rows[0]):
        return grid.rows[y][x]
    return OUT


def is_cells(text: str) -> bool:
    """A line of cells (`"..##m..."`: a machine's time slots, a row of a map): a short string
    of a few distinct symbols and no spaces, read by position, not as a word."""
    return 3 <= len(text) <= 64 and " " not in text and len(set(text)) <= MAX_CELL_SYMBOLS


def cells_at(text: str, path: str, numbers: list[int], f: Features) -> list[tuple[str, float]]:
    """A line of cells aligned with the candidate, read at the candidate's own id numbers
    (`slot_oven_3` on `busy.oven`: the cell at 3): `AT:<line>|<k>:<symbol>` the symbol there,
    and `RUN:<line>|<k>:<symbol>` how many cells from there hold it (free slots ahead), under
    the symbol's name, so that its comparison with the context (`GE:RUN:busy.*|0:.|job.dur`:
    a free stretch at least the job's length) says what it is a run of. The runs, to compare."""
    runs: list[tuple[str, float]] = []
    for k, at in enumerate(numbers):
        if at >= len(text):
            f[name("AT", path, k, "past")] = 1.0
            continue
        symbol, rest = text[at], text[at:]
        f[name("AT", path, k, symbol)] = 1.0
        key = name("RUN", path, k, symbol)
        f[key] = float(len(rest) - len(rest.lstrip(symbol)))
        runs.append((key, f[key]))
    return runs
