"""The status card (SPEC §9): one model, one text renderer (used by SSE, CLI and dashboard), and
the `progress.snapshot.json` writer with the skill's keys plus ours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel

from core.rundir import SNAPSHOT, write_json_atomic

WIDTH = 64
BAR_WIDTH = 18


class Card(BaseModel):
    run_id: str
    kind: str
    status: str = "queued"
    trainer: str | None = None
    phase: str | None = None
    step: int | None = None
    total_steps: int | None = None
    # What `step` counts: None (a trainer's optimizer steps), "rows" or "bytes" (read).
    unit: str | None = None
    # A pass the stage runs besides its own steps (a trainer's "eval" on its val rows): the phase
    # line shows it and its own count until it ends.
    pass_name: str | None = None
    pass_done: int | None = None
    pass_total: int | None = None
    pass_unit: str | None = None
    data_source: str | None = None
    ram_used_gb: float | None = None
    ram_total_gb: float | None = None
    ram_budget: str = "auto"
    vram_used_gb: float | None = None
    vram_total_gb: float | None = None
    elapsed_s: float = 0.0
    eta_s: float | None = None
    percent: float = 0.0
    loss: float | None = None
    current_anchor: float | None = None
    current_train: float | None = None
    current_gap: float | None = None
    best_anchor: float | None = None
    best_train: float | None = None
    best_gap: float | None = None
    best_candidate: str | None = None
    candidate: str | None = None
    completed_count: int | None = None
    total_candidates: int | None = None
    attempt: int = 1
    worker: str | None = None


def show_best(card: Card, scores: dict[str, Any]) -> None:
    """The card's `best` line from a scorecard's headline scores (anchor, train, gap)."""
    card.best_anchor = scores.get("anchor_score")
    card.best_train = scores.get("train_score")
    card.best_gap = scores.get("generalization_gap")


def measure_ram(pids: list[int] | None = None) -> tuple[float, float]:
    """(GB resident in the given processes, or the machine's used memory; GB total)."""
    vm = psutil.virtual_memory()
    used = vm.total - vm.available
    if pids:
        used = 0
        for pid in pids:
            try:
                used += psutil.Process(pid).memory_info().rss
            except psutil.Error:
                continue
    return used / 1e9, vm.total / 1e9


def eta_text(eta_s: float | None) -> str:
    if eta_s is None:
        return "estimating"
    total = int(round(eta_s))
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes:02d}:{seconds:02d}"


def progress_bar(percent: float, width: int = BAR_WIDTH) -> str:
    filled = int(max(0.0, min(100.0, percent)) / 100 * width)
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _gb(used: float | None, total: float | None) -> str:
    if used is None:
        return "-"
    return f"{used:.1f}/{total:.1f} GB" if total else f"{used:.1f} GB"


SIZE_UNITS = ("B", "KB", "MB", "GB", "TB")


def _size(n: float) -> str:
    """Decimal units, three significant digits: the dashboard's `bytesText` convention."""
    value, unit = float(n), 0
    while abs(value) >= 999.5 and unit < len(SIZE_UNITS) - 1:
        value, unit = value / 1000, unit + 1
    return f"{round(value)} B" if unit == 0 else f"{value:#.3g} {SIZE_UNITS[unit]}"


def count_text(done: int | None, total: int | None, unit: str | None) -> str:
    """What a counter has done, with what it counts: `step  12/400`, `120/480 rows`,
    `2.1 MB/2.2 MB read`; `-` before the first report."""
    if done is None:
        return "-"
    if unit is None:
        return f"step  {done}/{total}" if total else f"step  {done}"
    if unit == "bytes":
        return f"{_size(done)}/{_size(total)} read" if total else f"{_size(done)} read"
    return f"{done}/{total} {unit}" if total is not None else f"{done} {unit}"


def printable(text: str) -> str:
    """`text` as it may reach a terminal: printable ASCII kept, anything else written as its
    Python escape (`\\x1b`, `\\n`, `\\u202e`). Names, reasons and sources come from clients and
    from the data; unescaped, an escape sequence in one could retitle, clear or rewrite a
    terminal showing the card or `trm show`/`trm watch`. The card and the CLI print through this."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(ch if " " <= ch <= "~" else ch.encode("unicode_escape").decode() for ch in text)


def printable_lines(text: str) -> str:
    """Several lines (a card the API rendered) through `printable`, their line breaks kept."""
    return "\n".join(printable(line) for line in text.split("\n"))


def _fit(text: str, width: int) -> str:
    return text[:width].ljust(width)


def _title(card: Card) -> str:
    """The top line's text: the status always (pollers read it there, the skill included); the
    trainer only where it fits beside it."""
    head = f" trm run {card.run_id}  {card.kind}"
    trainer = f"  {card.trainer}" if card.trainer else ""
    short = f" {card.run_id}  {card.kind}  {card.status} "
    for title in (f"{head}{trainer}  {card.status} ", f"{head}  {card.status} ", short):
        if len(title) <= WIDTH - 6:
            return title
    return f" {card.run_id}  {card.status} "


def render_text(card: Card) -> str:
    """The box: every line exactly WIDTH characters, ASCII only (every text field through
    `printable`)."""
    card = card.model_copy(
        update={k: printable(v) for k, v in card.model_dump().items() if isinstance(v, str)}
    )
    inner = WIDTH - 4
    title = _title(card)
    top = "+--" + title.ljust(WIDTH - 4, "-")[: WIDTH - 4] + "+"
    phase = card.phase or card.status
    if card.pass_name:
        phase = f"{phase} {card.pass_name}"
        step = count_text(card.pass_done, card.pass_total, card.pass_unit)
    elif card.candidate is not None and card.total_candidates:
        step = f"cand  {card.completed_count or 0}/{card.total_candidates}"
    else:
        step = count_text(card.step, card.total_steps, card.unit)
    vram = _gb(card.vram_used_gb, card.vram_total_gb)
    ram = _gb(card.ram_used_gb, card.ram_total_gb)
    bar = f"{progress_bar(card.percent)}  {card.percent:5.1f}%"
    best = (
        f"anchor {_num(card.best_anchor)} train {_num(card.best_train)} gap {_num(card.best_gap)}"
    )
    if card.best_candidate:
        best += f"  (cand {card.best_candidate})"
    rows = [
        f"phase   {_fit(phase, 21)} {step}",
        f"data    {_fit(card.data_source or '-', 21)} RAM  {ram}  VRAM  {vram}",
        f"ETA     {_fit(eta_text(card.eta_s), 21)} {bar}",
        f"now     loss {_num(card.loss)}  anchor {_num(card.current_anchor)}"
        f"  train {_num(card.current_train)}  gap {_num(card.current_gap)}",
        f"best    {best}",
    ]
    body = ["| " + _fit(row, inner) + " |" for row in rows]
    return "\n".join([top, *body, "+" + "-" * (WIDTH - 2) + "+"])


def snapshot(card: Card) -> dict[str, Any]:
    """The skill's `progress.snapshot.json` keys, then ours (the whole card)."""
    return {
        "run_id": card.run_id,
        "phase": card.phase,
        "step": card.step,
        "unit": card.unit,
        "data_source": card.data_source,
        "ram_budget": card.ram_budget,
        "elapsed": round(card.elapsed_s, 1),
        "eta": eta_text(card.eta_s),
        "percent_complete": round(card.percent, 1),
        "progress_bar": progress_bar(card.percent),
        "current_anchor": card.current_anchor,
        "current_train": card.current_train,
        "current_gap": card.current_gap,
        "best_anchor": card.best_anchor,
        "best_train": card.best_train,
        "best_gap": card.best_gap,
        "completed_count": card.completed_count,
        "total_candidates": card.total_candidates,
        "card": card.model_dump(),
        "text": render_text(card),
    }


def write_snapshot(card: Card, run_dir: Path) -> None:
    write_json_atomic(run_dir / SNAPSHOT, snapshot(card), durable=False)
