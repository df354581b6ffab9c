"""The `hillclimb` run spec (SPEC §8): a base `train` spec, the ladder, the knobs and the keep rule.

`base` is a full `train` spec (its `kind` may be left out), validated as a `TrainSpec`
(schemas/train.py); the validated, filled-in train spec is what the search stores and mutates.
The anchors are the base corpus' anchors (`anchors` here sets them when the base names none);
they never change during a search.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from core.schemas.common import MAX_COUNT, CommonSpec, PromotionTerms, Seed, StrictModel
from core.schemas.train import QloraTrainerConfig, TrainSpec, TrmTrainerConfig

RUNG_NAMES = (
    "in_domain",
    "light_generalization",
    "cross_run",
    "cross_env_family",
    "broad_generalization",
    "hardest_setting",
)
Compression = Literal["full", "keys", "minimal"]
MAX_VALUES = 32  # values per knob range: a search walks them one step at a time


def _off_on() -> list[bool | Literal["auto"]]:
    return [False, True]


class KnobRanges(StrictModel):
    """The values each data knob (SPEC §4) may take; a knob with fewer than two is not turned.

    `heldout_breadth` and `state_compression` start where the rung puts them; a range here lets a
    candidate also move them one step from there.
    """

    source_mix: list[dict[str, float]] = Field(
        default_factory=list,
        max_length=MAX_VALUES,
        description="Source weightings a candidate may take, each weighing exactly the base "
        "sources (corpus `knobs.source_mix`).",
    )
    heldout_breadth: list[int] = Field(
        default_factory=list,
        max_length=MAX_VALUES,
        description="Values of the corpus knob `heldout_breadth` (groups sent to val), one step "
        "from where the rung puts it.",
    )
    state_compression: list[Compression] = Field(
        default_factory=list,
        max_length=MAX_VALUES,
        description="Values of the corpus knob `state_compression`, one step from where the rung "
        "puts it.",
    )
    negative_rate: list[float | None] = Field(
        default_factory=lambda: [None, 0.1, 0.25, 0.5],
        max_length=MAX_VALUES,
        description="Values of the corpus knob `negative_rate` (critic negatives per train row; "
        "null keeps all).",
    )
    recovery_rate: list[float | None] = Field(
        default_factory=lambda: [None, 0.1, 0.2, 0.3],
        max_length=MAX_VALUES,
        description="Values of the corpus knob `recovery_rate` (share of recovery rows in "
        "train; null keeps the natural share).",
    )
    namespace_normalization: list[bool | Literal["auto"]] = Field(
        default_factory=_off_on,
        max_length=MAX_VALUES,
        description="Values of the corpus knob `namespace_normalization`.",
    )

    @field_validator("heldout_breadth")
    @classmethod
    def _breadth_not_negative(cls, value: list[int]) -> list[int]:
        if any(v < 0 for v in value):
            raise ValueError("heldout_breadth values must be >= 0")
        return value


class TrainerKnobRanges(StrictModel):
    """Trainer settings the search may also turn. Off (empty) by default: a generalization search
    should move the data, not drift into hyperparameter tuning. Each value is bounded as the
    trainer's own setting is (a range could otherwise carry `hidden: [4096]` past the spec's
    bounds)."""

    n_recursions: list[int] = Field(
        default_factory=list, max_length=MAX_VALUES, description="Values of trm `n_recursions`."
    )
    cycles: list[int] = Field(
        default_factory=list, max_length=MAX_VALUES, description="Values of trm `cycles`."
    )
    supervision_steps: list[int] = Field(
        default_factory=list,
        max_length=MAX_VALUES,
        description="Values of trm `supervision_steps`.",
    )
    hidden: list[int] = Field(
        default_factory=list, max_length=MAX_VALUES, description="Values of trm `hidden`."
    )
    epochs: list[int] = Field(
        default_factory=list,
        max_length=MAX_VALUES,
        description="Values of the trainer's `epochs` (trm or qlora).",
    )
    lr: list[float] = Field(
        default_factory=list,
        max_length=MAX_VALUES,
        description="Values of the trainer's `lr` (trm or qlora).",
    )
    batch_size: list[int] = Field(
        default_factory=list, max_length=MAX_VALUES, description="Values of trm `batch_size`."
    )
    r: list[int] = Field(
        default_factory=list, max_length=MAX_VALUES, description="Values of qlora `r`."
    )
    alpha: list[int] = Field(
        default_factory=list, max_length=MAX_VALUES, description="Values of qlora `alpha`."
    )

    @model_validator(mode="after")
    def _within_the_trainers_bounds(self) -> TrainerKnobRanges:
        for name, values in self.model_dump().items():
            # Epochs are checked against trm's bound, the larger (the base names the trainer).
            trainer = QloraTrainerConfig if name in ("r", "alpha") else TrmTrainerConfig
            for index, value in enumerate(values):
                try:
                    trainer.model_validate({name: value})
                except ValidationError as exc:
                    raise ValueError(f"{name}[{index}]: {exc.errors()[0]['msg']}") from None
        return self


class Rung(StrictModel):
    """What one rung of the generalization ladder does to the data."""

    name: str = Field(max_length=200, description="The rung's name, shown in the ledger.")
    split_by: Literal["env", "run", "episode", "row"] | None = Field(
        default=None,
        description="The split level on this rung; null keeps the base corpus' `split.by`.",
    )
    heldout_breadth: int = Field(
        ge=0,
        le=MAX_COUNT,
        description="Groups sent to val on this rung (corpus `knobs.heldout_breadth`).",
    )
    state_compression: Compression = Field(
        description="The corpus knob `state_compression` on this rung."
    )
    namespace_normalization: bool = Field(
        default=False,
        description="true forces shared action tags from this rung up; false leaves the knob "
        "to the search.",
    )


class PromoteBest(PromotionTerms):
    """Promote the search's best candidate under a controller name when the search ends (as
    `trm promote SEARCH --as NAME` would, once the search has completed)."""

    min_anchor_score: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="promote only when the best candidate's anchor score is at least this",
    )


class HillclimbSpec(CommonSpec):
    kind: Literal["hillclimb"] = Field(description="The run kind: `hillclimb`.")
    base: dict[str, Any] = Field(
        description="A full `train` spec (its `kind` may be left out): the root candidate every "
        "mutation starts from."
    )
    anchors: list[str] = Field(
        default_factory=list,
        max_length=100_000,
        description="The anchor groups every candidate is compared on, when the base corpus "
        "names none (`split.anchor`); fixed for the whole search.",
    )
    start_rung: int = Field(
        default=0, ge=0, le=5, description="The ladder rung the search starts on (0 to 5)."
    )
    ladder: list[Rung] | None = Field(
        default=None,
        min_length=6,
        max_length=6,
        description="Six rungs replacing the default ladder (worker/hillclimb/ladder.py), rung 0 "
        "first.",
    )
    knobs: KnobRanges = Field(
        default_factory=KnobRanges, description="The values each data knob may take."
    )
    trainer_knobs: TrainerKnobRanges = Field(
        default_factory=TrainerKnobRanges,
        description="Trainer settings the search may also turn; none by default.",
    )
    patience: int = Field(
        default=3,
        ge=1,
        le=1000,
        description="Candidates without a new best after which the search moves a rung (or, "
        "after a move that found nothing better, stops).",
    )
    max_candidates: int = Field(
        default=12, ge=1, description="at most the server's TRM_MAX_CANDIDATES (checked at submit)"
    )
    parallelism: int = Field(
        default=1, ge=1, le=64, description="Candidate runs kept in flight at once."
    )
    noise_margin: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="Anchor-score difference taken as noise: a candidate must beat the best by "
        "more to become best (a near tie may branch), and the untrained model by more to count.",
    )
    max_generalization_gap: float = Field(
        default=0.15,
        ge=0,
        le=1,
        description="A candidate whose generalization gap is over this is discarded, however "
        "well it scores.",
    )
    seed: Seed = Field(
        default=0,
        description="Drives the mutations: the same seed and candidate index pick the same one, "
        "so a resumed search proposes what it would have.",
    )
    promote: PromoteBest | None = Field(
        default=None,
        description="When set, the best candidate becomes the name's next live version as the "
        "search ends.",
    )

    @field_validator("base", mode="before")
    @classmethod
    def _base_is_a_train_spec(cls, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ValueError("base must be a train spec (an object)")
        kind = value.get("kind", "train")
        if kind != "train":
            raise ValueError(f"base.kind must be 'train' (got {kind!r})")
        try:
            spec = TrainSpec.model_validate({**value, "kind": "train"})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
            raise ValueError(f"base.{where}: {first['msg']}{more}") from None
        if spec.dry_run:
            raise ValueError("base.dry_run: set dry_run on the hillclimb spec, not on its base")
        if spec.trainer == "trm_grid":  # its knobs and ladder reshape log rows, not puzzles
            raise ValueError("base.trainer: a hill-climb searches log corpora; trm_grid is not one")
        return spec.model_dump(mode="json")

    @model_validator(mode="after")
    def _anchors_fixed(self) -> HillclimbSpec:
        split = self.base["corpus"]["split"]
        if self.anchors and split["anchor"] and sorted(self.anchors) != sorted(split["anchor"]):
            raise ValueError(
                "anchors differ from base.corpus.split.anchor; name the anchors in one place"
            )
        if self.anchors:
            split["anchor"] = list(self.anchors)
        else:
            self.anchors = list(split["anchor"])
        if not self.anchors:
            raise ValueError(
                "anchors: a search needs fixed anchor groups (anchors, or "
                "base.corpus.split.anchor): candidates are compared on them"
            )
        sources = {s["name"] for s in self.base["corpus"]["sources"]}
        for index, mix in enumerate(self.knobs.source_mix):
            if set(mix) != sources:
                raise ValueError(
                    f"knobs.source_mix[{index}] must weigh exactly the base sources "
                    f"({', '.join(sorted(sources))})"
                )
        return self
