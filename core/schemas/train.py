"""The `train` spec (SPEC §3.3, §6): a corpus and one trainer's config."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator

from core.schemas.common import MAX_COUNT, STEPS_LIMIT, CommonSpec, Seed, StrictModel
from core.schemas.corpus import CorpusSpec
from core.schemas.puzzles import GridTrainerConfig, check_puzzle_trainer

TextEncoder = Literal["tokens", "smollm2"]


class TrmTrainerConfig(StrictModel):
    """The tiny recursive model (worker/models/trm.py, worker/train/trm.py), in the paper's
    terms: `n_recursions` latent updates per answer update (n), `cycles` per supervision step,
    the first cycles-1 without gradients (T), and up to `supervision_steps` deeply supervised
    steps per batch, with halting (N_sup). 1/1/1 is the one-step model. The run's `seed` drives
    it. Training keeps the epoch with the best val accuracy and stops after `patience` epochs
    without a better one; a val accuracy that has not moved since the first epoch (val worlds
    the model answers alike whatever it learned) neither chooses nor stops: the latest is kept.
    `feature_dropout` removes that share of each train row's features (every number of each, for
    every candidate alike): a regularizer for worlds that show fewer of the train worlds'
    features; 0 by default (measured in docs/quality.md: it helps grid and costs
    verify). `dropout` drops the network's hidden units while training, likewise 0 by default
    (on fresh seeds it moves grid +0.02 and costs schedule 0.05). Neither changes the saved
    weights' shape nor how a model answers.

    Every size has an upper bound, and two checks run on the worker once the corpus is known,
    before training (worker/models/footprint.py): the steps, `max_steps` or `epochs` x
    ceil(train rows / (batch_size x grad_accum)), must stay within TRM_MAX_STEPS, and the memory
    estimate within the worker's free RAM (VRAM on a GPU); either refusal is `bad_input` naming
    the knobs and the figure."""

    n_recursions: int = Field(
        default=2,
        ge=1,
        le=16,
        description="Latent updates per answer update (the paper's n): more compute per step "
        "for a deeper look at each row.",
    )
    cycles: int = Field(
        default=2,
        ge=1,
        le=8,
        description="Answer-update cycles per supervision step (the paper's T); all but the last "
        "run without gradients.",
    )
    supervision_steps: int = Field(
        default=3,
        ge=1,
        le=16,
        description="Deeply supervised steps per batch, each with a loss, cut short by the halting "
        "head (the paper's N_sup).",
    )
    hidden: int = Field(
        default=64,
        ge=8,
        le=1024,
        description="Width of the network's hidden layers: the model's size and memory grow "
        "with it.",
    )
    epochs: int = Field(
        default=40,
        ge=1,
        le=1000,
        description="Passes over the train split at most; `patience` or `max_steps` may stop "
        "sooner.",
    )
    patience: int = Field(
        default=8,
        ge=1,
        le=1000,
        description="Epochs without a better val figure (`select_by`) after which training stops.",
    )
    max_steps: int | None = Field(default=None, ge=1, description=STEPS_LIMIT)
    batch_size: int = Field(
        default=32, ge=1, le=4096, description="Train rows per forward pass (micro-batch)."
    )
    grad_accum: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="Batches whose gradients add up to one optimizer step (1 in a probe).",
    )
    lr: float = Field(
        default=2e-3,
        gt=0,
        lt=1,
        description="Peak AdamW learning rate: a linear warmup to it, then a cosine down to a "
        "tenth of it.",
    )
    halt_weight: float = Field(
        default=0.5,
        ge=0,
        le=10,
        description="Weight of the halting head's loss beside the answer's.",
    )
    feature_dropout: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="Share of the features removed from each training row (every number of it, "
        "all its candidates alike): a regularizer for worlds that show fewer features; 0: none.",
    )
    dropout: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="Dropout on the network's hidden units while training (none at inference); "
        "0: none (docs/quality.md: at 0.2, grid +0.02 and schedule -0.05 on fresh seeds).",
    )
    wide: float = Field(
        default=0.0,
        ge=0,
        le=1000,
        description="A linear text part beside the network: every word and pair of words of the "
        "row's texts, hashed with the candidate's id, as a logistic regression of this strength "
        "(sklearn's C; 1 is its default) fitted first, the network trained on top; 0: none. It "
        "reads the rare words the feature space's floors leave out (worker/features/wide.py).",
    )
    wide_buckets: int = Field(
        default=1 << 18,
        ge=1 << 10,
        le=1 << 22,
        description="Weights of the linear text part (`wide`): its terms are hashed into this "
        "many, 4 bytes each in the model. A corpus of many distinct words and pairs shares "
        "buckets between them at the default; 1048576 (4 MB) leaves fewer shared.",
    )
    wide_reading: int = Field(
        default=2,
        ge=1,
        le=2,
        description="How the linear text part reads a row (worker/features/wide.py): 2, every "
        "word and pair of words with stopwords kept, and a bias per candidate; 1, stopwords left "
        "out and no bias (a model's config without this field was trained so, and is read so).",
    )
    screen: int = Field(
        default=32,
        ge=0,
        le=100_000,
        description="Columns the network reads: the ones of most gain in a quick LightGBM ranker "
        "fitted on the train rows first (worker/train/trm_screen.py); the ranker is discarded "
        "and the model's features.json holds only these. 0, or fewer than 100 train rows: every "
        "column of the feature space (docs/quality.md: on verify's 15 judging rows 0.646 with "
        "every column, 0.855 with 32, 0.829 with 64).",
    )
    select_by: Literal["accuracy", "accuracy_1se", "loss", "auc"] = Field(
        default="accuracy",
        description="Which val figure picks the epoch kept: `accuracy` (ties: the lower loss); "
        "`accuracy_1se`, the latest epoch within one binomial standard error of the best val "
        "accuracy (sqrt(p(1-p)/n) at the best p over n val rows: where the val worlds are "
        "answered well from the first epochs, the more trained epoch rather than the first "
        "peak; docs/quality.md: grid +0.011, verify -0.035 on fresh seeds); "
        "where the score is a ranking across rows (a router swept by threshold), not the pick of "
        "each, `auc` (per row, the share of the labelled candidate's wrong instances in other "
        "rows it outscores: for two candidates the ROC AUC; ties: the lower loss) or `loss`. "
        "With a text part (`wide`), `auc` and `loss` offer the part alone (the network's "
        "scores left out) before the first epoch: a network that never beats it on val is not "
        "kept.",
    )
    select_after_warmup: bool = Field(
        default=False,
        description="true: val selection starts once the averaged weights are mostly past the "
        "learning-rate warmup (warmup + 50 batches); the epochs before are trained, never kept. "
        "false (the default): every epoch is a candidate.",
    )
    text_encoder: TextEncoder = Field(
        default="tokens",
        description="How long context texts are read: `tokens`, as words; `smollm2`, also by "
        "the frozen SmolLM2-135M as a sentence encoder (`E:` features: "
        "worker/models/sentence.py).",
    )
    checkpoint_every: int = Field(
        default=200,
        ge=1,
        le=MAX_COUNT,
        description="Batches between checkpoints (one is also written on a stop); an interrupted "
        "run resumes from the newest.",
    )


class GbdtTrainerConfig(StrictModel):
    """The reference learner (worker/train/gbdt.py): a LightGBM candidate ranker over the same
    (state, candidate) features as the trm. What a user would pick instead of a neural model."""

    n_estimators: int = Field(
        default=400,
        ge=1,
        le=5000,
        description="Boosting rounds (trees) at most; early stopping may keep fewer.",
    )
    learning_rate: float = Field(
        default=0.05, gt=0, le=1, description="Shrinkage applied to each tree's contribution."
    )
    num_leaves: int = Field(
        default=31,
        ge=2,
        le=1024,
        description="Leaves per tree at most: larger fits finer, and overfits sooner.",
    )
    min_child_samples: int = Field(
        default=5,
        ge=1,
        le=10000,
        description="Rows a leaf must hold at least: larger smooths the trees.",
    )
    early_stopping_rounds: int = Field(
        default=50,
        ge=1,
        le=5000,
        description="Boosting stops when the val split's accuracy has not improved for this "
        "many rounds; the best round is kept.",
    )
    text_encoder: TextEncoder = Field(
        default="tokens", description="How long context texts are read, as the trm's."
    )


EFFECTIVE_BATCH = 16  # rows per qlora optimizer step when grad_accum is auto
# The memory (MiB) a qlora run's `auto` speed knobs spend in all: the dequantized copy first
# (SmolLM2-135M in bf16: 202 MiB), kept activations with the rest.
SPEED_MEMORY_MB = 400


BatchSize = Annotated[int, Field(ge=1, le=1024)] | Literal["auto"]


def qlora_batch(micro: int | str, accum: int | str, *, cuda: bool) -> tuple[int, int]:
    """`micro_batch` and `grad_accum` as numbers on this device (their `auto` values)."""
    micro_n = (8 if cuda else 1) if micro == "auto" else int(micro)
    accum_n = max(1, EFFECTIVE_BATCH // micro_n) if accum == "auto" else int(accum)
    return micro_n, accum_n


class QloraTrainerConfig(StrictModel):
    """LoRA adapters on a 4-bit base model (worker/train/qlora.py). Sizes are bounded; on the
    worker, the steps (`max_steps`, or `epochs` x ceil(sequences / (micro_batch x grad_accum)),
    counting the fewest packed sequences the corpus can make) must stay within TRM_MAX_STEPS and
    the memory estimate within the worker's free RAM or VRAM (worker/models/footprint.py), else
    `bad_input` with the figure."""

    base_model: str = Field(
        default="smollm2-135m-instruct",
        min_length=1,
        max_length=200,
        description="The model adapted: a folder in MODEL_CACHE, or the built-in "
        "`smollm2-135m-instruct`; nothing is downloaded.",
    )
    r: int = Field(
        default=16,
        ge=1,
        le=512,
        description="LoRA rank: the adapters' width, so their size and what they can learn.",
    )
    alpha: int = Field(
        default=32,
        ge=1,
        le=4096,
        description="LoRA scaling: the adapters' update is scaled by alpha / r.",
    )
    dropout: float = Field(
        default=0.05, ge=0, lt=1, description="Dropout on the adapters' input while training."
    )
    target_modules: list[str] | Literal["all-linear"] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        max_length=64,
        description="The base model's layers that get adapters, by name; `all-linear`: every "
        "linear layer.",
    )
    lr: float = Field(default=2e-4, gt=0, lt=1, description="Peak learning rate of the adapters.")
    micro_batch: BatchSize = Field(
        default="auto",
        description="Packed sequences per forward pass: auto is 1 on a CPU (the fastest there, "
        "and the least memory: bench/train_throughput.py) and 8 on a GPU.",
    )
    grad_accum: BatchSize = Field(
        default="auto",
        description=f"Micro-batches per optimizer step: auto makes an effective batch of "
        f"{EFFECTIVE_BATCH} ({EFFECTIVE_BATCH} // micro_batch, at least 1).",
    )
    max_seq_len: int = Field(
        default=512,
        ge=16,
        le=32768,
        description="Tokens per training sequence; a longer row keeps its last tokens (the "
        "prompt's beginning cut, and its scoring cuts it the same way), one whose answer alone "
        "does not fit is dropped (a route row renders to about 410 tokens).",
    )
    epochs: int = Field(default=1, ge=1, le=100, description="Passes over the train split.")
    max_steps: int | None = Field(default=None, ge=1, description=STEPS_LIMIT)
    eval_every: int = Field(
        default=50,
        ge=1,
        le=MAX_COUNT,
        description="Optimizer steps between val-loss evals (also taken before the first step "
        "and at the end).",
    )
    eval_rows: int = Field(
        default=256,
        ge=0,
        le=MAX_COUNT,
        description="The val rows of that eval (the first ones; a signal, not the scorecard); "
        "0: no eval.",
    )
    checkpoint_every: int = Field(
        default=50,
        ge=1,
        le=MAX_COUNT,
        description="Optimizer steps between checkpoints; an interrupted run resumes from the "
        "newest.",
    )
    packing: bool = Field(
        default=True,
        description="Pack several rows into each `max_seq_len` sequence (each attending only "
        "to itself); false: one row a sequence, grouped by length.",
    )
    seed: Seed = Field(default=0, description="Unused in a run: the run's own `seed` wins over it.")
    # Speed knobs: none of them changes what is computed, only how fast and in how much
    # memory (compute_dtype aside, which changes the rounding).
    compute_dtype: Literal["auto", "float32", "bfloat16"] = Field(
        default="auto",
        description="The base model's compute dtype: auto is bf16 on CUDA and on CPUs with "
        "AVX512-BF16, float32 on other CPUs.",
    )
    activation_budget_mb: Annotated[int, Field(ge=0, le=1_048_576)] | Literal["auto"] = Field(
        default="auto",
        description=f"Memory (MiB) a micro-batch may spend keeping decoder layers' activations "
        f"instead of recomputing them in backward (gradient checkpointing): the layers that fit "
        f"run about a third faster; 0 checkpoints every layer. auto: {SPEED_MEMORY_MB} MiB less "
        f"the dequantized copy, if one is held (a CPU run's peak RSS stays at or under TRL's: "
        f"bench/train_throughput.py).",
    )
    dequant_cache: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Dequantize the frozen 4-bit weights once into the compute dtype (2 bytes a "
        "weight in bf16, 4 in float32) instead of on every call; auto: on a CPU computing in "
        "bf16 (where dequantizing costs as much as the matmuls), where the copy takes at most an "
        "eighth of the available RAM; in float32 the matmuls dominate and the memory buys more "
        "as kept activations.",
    )


class TrainEvaluateConfig(StrictModel):
    """What the train run's evaluate stage scores besides the anchors (every anchor row, always).
    A qlora model scores a row in about a second on a CPU, so these size how long evaluate
    takes: `train_sample` rows of the train split give train_score and the generalization gap;
    `episodes` rollouts per anchor world give the failure and recovery rates."""

    train_sample: int = Field(
        default=1000,
        ge=1,
        le=MAX_COUNT,
        description="Rows of the train split scored for train_score and the generalization gap.",
    )
    episodes: int = Field(
        default=20,
        ge=1,
        le=1000,
        description="Rollouts per anchor world, for the failure and recovery rates.",
    )


class TrainSpec(CommonSpec):
    kind: Literal["train"] = Field(description="The run kind: `train`.")
    trainer: Literal["trm", "gbdt", "qlora", "trm_grid"] = Field(
        default="trm",
        description="Which learner is trained; only its config below is read. `trm_grid` is the "
        "whole-answer trm on puzzle sets (core/schemas/puzzles.py), not a controller.",
    )
    corpus: CorpusSpec = Field(description="The rows trained and scored on, and their split.")
    trm: TrmTrainerConfig = Field(
        default_factory=TrmTrainerConfig, description="Read when `trainer` is `trm`."
    )
    gbdt: GbdtTrainerConfig = Field(
        default_factory=GbdtTrainerConfig, description="Read when `trainer` is `gbdt`."
    )
    qlora: QloraTrainerConfig = Field(
        default_factory=QloraTrainerConfig, description="Read when `trainer` is `qlora`."
    )
    trm_grid: GridTrainerConfig = Field(
        default_factory=GridTrainerConfig, description="Read when `trainer` is `trm_grid`."
    )
    evaluate: TrainEvaluateConfig = Field(
        default_factory=TrainEvaluateConfig,
        description="How much the evaluate stage scores besides the anchors.",
    )
    seed: Seed = Field(
        default=0,
        description="Drives the trainer's init and data order and the rows evaluation samples.",
    )

    @field_validator("corpus")
    @classmethod
    def _puzzles_for_trm_grid(cls, corpus: CorpusSpec, info: ValidationInfo) -> CorpusSpec:
        check_puzzle_trainer(info.data.get("trainer", "trm"), [s.type for s in corpus.sources])
        return corpus
