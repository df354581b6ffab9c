"""The `qlora` trainer's data: chat rows -> token ids with labels on the assistant's answer only,
planned into sequences (packed, or grouped by length), and collated into micro-batches.

Rows longer than `max_seq_len` (SPEC §6 leaves the policy to us; this is it):
- a row keeps its last `max_seq_len` tokens: the answer, the candidates and the end of the
  state, which the decision is made on; its prompt's beginning (the system message first) is
  cut. Such a row is counted (`truncated`), and the trainer reports the count in its result,
  `run_meta.json` and the stage manifest's counters, so a too-small `max_seq_len` shows;
- a row whose labelled tokens (the answer and its end-of-turn token) do not all fit is dropped
  and counted (`dropped`): half an answer with none of its prompt would train on noise. When no
  training row is left, the trainer fails `bad_input` naming the length that would fit.

Data order depends only on the seed and the epoch, never on `micro_batch`, so a run resumed after
an OOM retry (half the micro-batch, twice the accumulation) sees the same rows at each step.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from worker.context import StageFailure

IGNORE = -100
GROUP_CHUNK = 256  # rows sorted by length together when `packing` is off
PACK_LOOKBACK = 64  # open sequences a row may go into (first fit among the newest)


@dataclass
class Example:
    ids: list[int]
    labels: list[int]
    truncated: bool


@dataclass
class Encoded:
    """One split's examples and what fitting them into `max_seq_len` cost."""

    examples: list[Example] = field(default_factory=list)
    rows: int = 0
    truncated: int = 0  # kept, with the beginning of the prompt cut
    dropped: int = 0  # left out: the answer itself did not fit
    longest: int = 0  # tokens of the longest row, before any cut

    def counts(self) -> dict[str, int]:
        return {
            "rows": self.rows,
            "truncated": self.truncated,
            "dropped": self.dropped,
            "longest_tokens": self.longest,
        }


def read_messages(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    # "\n" only: str.splitlines would also cut at U+0085 and U+2028 inside a JSON string.
    lines = path.read_text(encoding="utf-8").split("\n")
    return [json.loads(line) for line in lines if line.strip()]


def assistant_labels(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
    """Render `messages` with the tokenizer's chat template; label the last (assistant) message's
    content tokens and the end-of-turn token that closes it (so the model learns to stop), and
    nothing else (-100)."""
    prompt = tokenizer.apply_chat_template(
        messages[:-1], tokenize=False, add_generation_prompt=True
    )
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    answer = messages[-1]["content"]
    start = text.find(answer, len(prompt)) if text.startswith(prompt) and answer else -1
    if start < 0:
        raise StageFailure(
            "bad_input",
            "the base model's chat template does not render the assistant answer right after the "
            "prompt; use a model whose template does (ChatML, Llama 3, Qwen2.5, SmolLM2)",
        )
    end = start + len(answer)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    labels = [
        tok if s < end and e > start else IGNORE for tok, (s, e) in zip(ids, offsets, strict=True)
    ]
    after = next((i for i, (s, _) in enumerate(offsets) if s >= end), None)
    if after is not None and ids[after] in set(tokenizer.all_special_ids):
        labels[after] = ids[after]
    return ids, labels


def encode(tokenizer: Any, rows: list[dict[str, Any]], max_seq_len: int) -> Encoded:
    """Token ids and labels per row, cut to `max_seq_len` as the module docstring says."""
    out = Encoded(rows=len(rows))
    for row in rows:
        ids, labels = assistant_labels(tokenizer, row["messages"])
        out.longest = max(out.longest, len(ids))
        if len(ids) <= max_seq_len:
            out.examples.append(Example(ids, labels, False))
            continue
        first_label = next(i for i, label in enumerate(labels) if label != IGNORE)
        if len(ids) - first_label >= max_seq_len:  # each label needs a token before it
            out.dropped += 1
            continue
        out.truncated += 1
        out.examples.append(Example(ids[-max_seq_len:], labels[-max_seq_len:], True))
    return out


def plan_epoch(
    lengths: list[int], max_seq_len: int, packing: bool, seed: int, epoch: int
) -> list[list[int]]:
    """The epoch's sequences, each a list of row indices, in training order."""
    rng = random.Random(f"qlora:{seed}:{epoch}")
    order = list(range(len(lengths)))
    rng.shuffle(order)
    if not packing:  # length-grouped: similar lengths side by side, chunks in random order
        chunks = [order[i : i + GROUP_CHUNK] for i in range(0, len(order), GROUP_CHUNK)]
        return [[i] for chunk in chunks for i in sorted(chunk, key=lambda i: lengths[i])]
    sequences: list[list[int]] = []
    room: list[int] = []
    for i in order:
        first = max(0, len(sequences) - PACK_LOOKBACK)
        slot = next((s for s in range(first, len(sequences)) if room[s] >= lengths[i]), None)
        if slot is None:
            sequences.append([])
            room.append(max_seq_len)
            slot = len(sequences) - 1
        sequences[slot].append(i)
        room[slot] -= lengths[i]
    rng.shuffle(sequences)
    return sequences


def collate(examples: list[Example], sequences: list[list[int]], pad_id: int) -> dict[str, Any]:
    """A micro-batch: rows concatenated per sequence, position ids restarting at every row (the
    model then keeps each row's attention to itself), padding as one more ignored segment."""
    ids, pos, labels = [], [], []
    for seq in sequences:
        ids.append([t for i in seq for t in examples[i].ids])
        labels.append([t for i in seq for t in examples[i].labels])
        pos.append([p for i in seq for p in range(len(examples[i].ids))])
    width = max(len(x) for x in ids)
    real = sum(len(x) for x in ids)
    for row_ids, row_pos, row_labels in zip(ids, pos, labels, strict=True):
        pad = width - len(row_ids)
        row_ids += [pad_id] * pad
        row_pos += list(range(pad))
        row_labels += [IGNORE] * pad
    return {
        "input_ids": torch.tensor(ids),
        "position_ids": torch.tensor(pos),
        "labels": torch.tensor(labels),
        "tokens": real,
        "rows": sum(len(seq) for seq in sequences),
        "label_tokens": sum(t != IGNORE for row in labels for t in row[1:]),
    }
