"""`build_corpus`: sources in, train/val/anchor/critic/messages files and manifest.json out.

The steps, top to bottom: find the files (a missing path fails before anything is written), read
and validate every line, drop duplicates, hold out anchors, route negatives and families below
the floor to the critic corpus, split the rest by group, turn the knobs, export, hash, write.
Every row read is accounted for in the manifest: kept, invalid (per reason), duplicate, or
dropped by a named knob.
"""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.schemas.corpus import CorpusSpec
from worker.corpus import export, knobs, split
from worker.corpus.messages import chat_row
from worker.corpus.rows import Row, Tally
from worker.corpus.sources import discover, read_source

FORMAT = "trm-corpus/1"
_PROGRESS_EVERY = 1 << 20


@dataclass
class CorpusResult:
    manifest: dict[str, Any]
    corpus_hash: str
    files: dict[str, Path]
    counters: dict[str, int]
    # True when out_dir already held this exact corpus and nothing was rewritten.
    reused: bool = False
    warnings: list[str] = field(default_factory=list)


class _Meter:
    """Calls progress(bytes_read, bytes_total) about once per MiB read, and at the end."""

    def __init__(self, callback: Callable[[int, int], None] | None, total: int) -> None:
        self.callback, self.total, self.done, self.next_call = callback, total, 0, 0

    def __call__(self, nbytes: int) -> None:
        self.done += nbytes
        if self.callback and self.done >= self.next_call:
            self.next_call = self.done + _PROGRESS_EVERY
            self.callback(self.done, self.total)

    def finish(self) -> None:
        if self.callback:
            self.callback(self.total, self.total)


def _digest(row: Row) -> str:
    key = row.state + "\x1f" + "\x1e".join(row.tools) + "\x1f" + row.action
    return hashlib.sha256(key.encode()).hexdigest()


def _read_all(spec: CorpusSpec, meter: _Meter) -> tuple[list[Tally], list[Row]]:
    found = discover(spec)
    files = [paths for paths, _ in found]
    meter.total = sum(path.stat().st_size for paths in files for path in paths)
    tallies: list[Tally] = []
    pool: list[Row] = []
    seen: set[str] = set()
    for source, (paths, skipped) in zip(spec.sources, found, strict=True):
        tally = Tally(source.name, source.type, source.path, links_outside=skipped)
        tallies.append(tally)
        for row in read_source(source, paths, tally, meter):
            row.digest = _digest(row)
            if spec.dedupe and row.digest in seen:
                tally.duplicates += 1
                continue
            seen.add(row.digest)
            tally.rows_kept += 1
            pool.append(row)
    meter.finish()
    return tallies, pool


class _Exporter:
    """Turns rows into exported dicts, applying the representation knobs once per row."""

    def __init__(self, spec: CorpusSpec) -> None:
        self.spec = spec
        self.knobs = spec.knobs
        self.not_json = 0
        self.emptied = 0
        self.collisions = 0
        self.renamed = 0

    def normalized(self, row: Row, split_name: str, **extra: Any) -> dict[str, Any]:
        state = row.state
        if self.knobs.state_compression != "full":
            squeezed = knobs.compress_state(
                row.state, row.state_obj, self.knobs.state_compression, self.knobs.state_keys
            )
            if squeezed is None:
                self.not_json += 1
            else:
                self.emptied += squeezed == "{}"
                state = squeezed
        tools, action = row.tools, row.action
        meta = dict(row.meta)
        if self.knobs.namespace_normalization:
            auto = row.tags if self.knobs.namespace_normalization == "auto" else None
            tagged = knobs.normalize_namespace(
                tools, action, row.env, self.knobs.namespace_map, auto
            )
            if tagged is None:
                self.collisions += 1
            elif tagged[0] != tools:
                self.renamed += 1
                meta["raw_tools"], meta["raw_action"] = tools, action
                tools, action = tagged
        meta["split"] = split_name
        meta.update(extra)
        return {"state": state, "tools": tools, "action": action, "meta": meta}

    def chat(self, exported: dict[str, Any], row: Row) -> dict[str, Any]:
        return chat_row(
            self.spec.contract,
            exported["state"],
            exported["tools"],
            exported["action"],
            row.answer,
            exported["meta"],
        )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Rows are millions of small acyclic objects: left on, the cyclic collector rescans them
    over and over and costs a third of the build. Nothing here makes cycles worth collecting."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def build_corpus(
    spec: CorpusSpec,
    out_dir: Path,
    *,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> CorpusResult:
    """Build the corpus `spec` describes into `out_dir` (see the module docstring).

    Raises CorpusInputError, naming the spec field, for a source path that is missing or holds
    no logs, or an anchor finer than the split level; nothing is written then. `progress` gets
    (bytes read, bytes total) while the sources are read.
    """
    with _collector_paused():
        return _build(spec, Path(out_dir), dry_run=dry_run, progress=progress)


@dataclass
class _Plan:
    """Where every kept row goes, and why: the split and the knobs' decisions."""

    level: str
    level_why: str
    val_why: str
    anchors: split.AnchorMatch
    below: dict[str, int]
    family_counts: dict[str, dict[str, int]]
    train: list[Row]
    val: list[Row]
    anchor: list[Row]
    # (row, split of its group, "negative" | "below_floor"), in read order
    critic: list[tuple[Row, str, str]]
    effects: dict[str, Any]
    dropped: dict[str, int]
    groups: dict[str, set[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _build(
    spec: CorpusSpec,
    out_dir: Path,
    *,
    dry_run: bool,
    progress: Callable[[int, int], None] | None,
) -> CorpusResult:
    tallies, pool = _read_all(spec, _Meter(progress, 0))
    plan = _plan(spec, pool)

    exporter = _Exporter(spec)
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in export.FILE_KEYS}
    for name, rows in (("train", plan.train), ("val", plan.val), ("anchor", plan.anchor)):
        chats = {"train": out["messages"], "val": out["messages_val"]}.get(name)
        for row in rows:
            exported = exporter.normalized(row, name)
            out[name].append(exported)
            if chats is not None:
                chats.append(exporter.chat(exported, row))
    for row, where, reason in plan.critic:
        out["critic"].append(exporter.normalized(row, where, critic_reason=reason))
    plan.effects["state_compression"] = {
        "level": spec.knobs.state_compression,
        "states_not_json": exporter.not_json,
        "states_emptied": exporter.emptied,
    }
    plan.effects["namespace_normalization"] = {
        "rows_renamed": exporter.renamed,
        "rows_kept_raw_on_collision": exporter.collisions,
    }

    contents = {name: export.encode_jsonl(rows) for name, rows in out.items()}
    digests = {name: export.sha256_hex(data) for name, data in contents.items()}
    corpus_hash = export.corpus_hash(digests)
    manifest = _manifest(spec, tallies, plan, out, digests, corpus_hash, dry_run=dry_run)
    counters = manifest["counters"]
    warnings = manifest["warnings"]
    if dry_run:
        return CorpusResult(manifest, corpus_hash, {}, counters, warnings=warnings)
    files = {name: out_dir / f"{name}.jsonl" for name in export.FILE_KEYS}
    files["manifest"] = out_dir / export.MANIFEST
    reused = export.already_there(out_dir, corpus_hash, digests)
    if reused:
        export.write_manifest(out_dir, manifest)
    else:
        export.write_corpus(out_dir, contents, manifest)
    return CorpusResult(manifest, corpus_hash, files, counters, reused=reused, warnings=warnings)


def _plan(spec: CorpusSpec, pool: list[Row]) -> _Plan:
    seed = spec.split.seed
    warnings: list[str] = []

    # Anchors first: nothing below (floor, knobs) may change them.
    anchors = split.match_anchors(pool, spec.split.anchor)
    rest = [row for row, held in zip(pool, anchors.is_anchor, strict=True) if not held]
    anchor_pool = [row for row, held in zip(pool, anchors.is_anchor, strict=True) if held]
    for name in anchors.missing:
        warnings.append(f"split.anchor: {name!r} matches no env or group")

    # Family floor over the positives that could be trained on.
    counts: dict[str, dict[str, int]] = {}
    for row in rest:
        bucket = counts.setdefault(row.family, {"positives": 0, "negatives": 0})
        bucket["negatives" if row.negative else "positives"] += 1
    counts = dict(sorted(counts.items()))
    below = {
        fam: c["positives"]
        for fam, c in counts.items()
        if c["positives"] < spec.min_exact_positives
    }
    for fam, count in below.items():
        warnings.append(
            f"family {fam!r} has {count} positive row(s), under min_exact_positives="
            f"{spec.min_exact_positives}: left out of the action corpus (to critic.jsonl)"
        )

    # The split level and the held-out groups come from the rows that can teach actions.
    teaching = [row for row in rest if not row.negative and row.family not in below]
    level: str
    if spec.split.by:
        level, level_why = spec.split.by, "split.by"
    else:
        level, level_why = split.default_level(teaching)
    split.check_anchor_levels(anchors, level)
    key = {id(row): split.group_key(row, level) for row in pool}
    val_groups, val_why = split.choose_val(
        (key[id(row)] for row in teaching),
        seed,
        spec.split.val_fraction,
        spec.knobs.heldout_breadth,
    )
    if not val_groups and (spec.split.val_fraction > 0 or spec.knobs.heldout_breadth):
        warnings.append(f"val is empty ({val_why}): too few {level} groups to hold one out")

    train: list[Row] = []
    val: list[Row] = []
    negatives: dict[str, list[Row]] = {"train": [], "val": [], "anchor": []}
    thin: dict[str, list[Row]] = {"train": [], "val": []}
    for row in rest:
        where = "val" if key[id(row)] in val_groups else "train"
        if row.negative:
            negatives[where].append(row)
        elif row.family in below:
            thin[where].append(row)
        else:
            (val if where == "val" else train).append(row)
    anchor = [row for row in anchor_pool if not row.negative]
    negatives["anchor"] = [row for row in anchor_pool if row.negative]

    # Knobs that choose rows act on train groups only.
    available = len(train)
    train, mix_effect = knobs.apply_source_mix(train, spec.knobs.source_mix, seed)
    after_mix = len(train)
    train, rec_effect = knobs.apply_recovery_rate(train, spec.knobs.recovery_rate, seed)
    kept_neg, neg_effect = knobs.apply_negative_rate(
        negatives["train"], len(train), spec.knobs.negative_rate, seed
    )
    dropped = {
        "source_mix": available - after_mix,
        "recovery_rate": after_mix - len(train),
        "negative_rate": len(negatives["train"]) - len(kept_neg),
    }
    negatives["train"] = kept_neg

    order = {id(row): i for i, row in enumerate(pool)}
    critic = [(row, where, "negative") for where, rows in negatives.items() for row in rows]
    critic += [(row, where, "below_floor") for where, rows in thin.items() for row in rows]
    critic.sort(key=lambda item: order[id(item[0])])

    # The proof of disjointness is computed from the rows as exported, not from the plan.
    groups: dict[str, set[str]] = {name: set() for name in split.SPLITS}
    for name, rows in (("train", train), ("val", val), ("anchor", anchor)):
        groups[name].update(key[id(row)] for row in rows)
    for row, where, _ in critic:
        groups[where].add(key[id(row)])
    effects = {
        "source_mix": mix_effect,
        "heldout_breadth": val_why,
        "recovery_rate": rec_effect,
        "negative_rate": neg_effect,
    }
    return _Plan(
        level,
        level_why,
        val_why,
        anchors,
        below,
        counts,
        train,
        val,
        anchor,
        critic,
        effects,
        dropped,
        groups,
        warnings,
    )


def _manifest(
    spec: CorpusSpec,
    tallies: list[Tally],
    plan: _Plan,
    out: dict[str, list[dict[str, Any]]],
    digests: dict[str, str],
    corpus_hash: str,
    *,
    dry_run: bool,
) -> dict[str, Any]:
    totals = {
        "rows_read": sum(t.rows_read for t in tallies),
        "rows_kept": sum(t.rows_kept for t in tallies),
        "rows_invalid": sum(t.rows_invalid for t in tallies),
        "duplicates": sum(t.duplicates for t in tallies),
    }
    counters = {
        **totals,
        **{name: len(out[name]) for name in ("train", "val", "anchor", "critic")},
        "dropped_by_knobs": sum(plan.dropped.values()),
    }
    links = sum(len(t.links_outside) for t in tallies)
    if links:
        counters["links_outside_skipped"] = links
    warnings = list(plan.warnings)
    for tally in tallies:
        if tally.rows_kept == 0:
            warnings.append(f"source {tally.name!r} kept no rows ({tally.rows_read} read)")
        if tally.links_outside:
            warnings.append(
                f"source {tally.name!r}: skipped {len(tally.links_outside)} file(s) that link "
                f"out of its folder: {', '.join(tally.links_outside)}"
            )
    invalid: dict[str, int] = {}
    for tally in tallies:
        for reason, count in tally.invalid.items():
            invalid[reason] = invalid.get(reason, 0) + count
    exported = sum(counters[name] for name in ("train", "val", "anchor", "critic"))
    overlaps = split.overlaps(plan.groups)
    reasons = [reason for _, _, reason in plan.critic]
    return {
        "format": FORMAT,
        "corpus_hash": corpus_hash,
        "contract": spec.contract,
        "dry_run": dry_run,
        "spec": spec.model_dump(mode="json"),
        "sources": [tally.to_manifest() for tally in tallies],
        "totals": totals,
        "invalid": dict(sorted(invalid.items())),
        "split": {
            "by": plan.level,
            "by_reason": plan.level_why,
            "seed": spec.split.seed,
            "val": plan.val_why,
            "anchor_names": {
                name: {"level": level, "rows": rows}
                for name, (level, rows) in sorted(plan.anchors.matched.items())
            },
            "anchor_missing": plan.anchors.missing,
            "groups": {name: sorted(groups) for name, groups in plan.groups.items()},
            "overlaps": overlaps,
            "disjoint": not any(overlaps.values()),
        },
        "splits": {
            **{
                name: {"rows": len(out[name]), "groups": len(plan.groups[name])}
                for name in split.SPLITS
            },
            "critic": {
                "rows": len(out["critic"]),
                "negative": reasons.count("negative"),
                "below_floor": reasons.count("below_floor"),
            },
        },
        "families": {
            "min_exact_positives": spec.min_exact_positives,
            "below_floor": plan.below,
            "counts": plan.family_counts,
        },
        "knobs": {
            **spec.knobs.model_dump(mode="json"),
            "effects": {**plan.effects, "dropped": plan.dropped},
        },
        "files": {
            f"{name}.jsonl": {"rows": len(out[name]), "sha256": digests[name]}
            for name in export.FILE_KEYS
        },
        "accounting": {
            "read = kept + invalid + duplicates": totals["rows_read"]
            == totals["rows_kept"] + totals["rows_invalid"] + totals["duplicates"],
            "kept = train + val + anchor + critic + dropped_by_knobs": totals["rows_kept"]
            == exported + counters["dropped_by_knobs"],
        },
        "counters": counters,
        "warnings": warnings,
    }
