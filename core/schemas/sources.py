"""The sources of a `train` spec's corpus (SPEC §4): which logs are read, one model per source
`type` (`Source` tells them apart). core/schemas/corpus.py's `CorpusSpec` holds a list of them.

Paths are strings here; the CLI resolves relative ones against the spec file, the API accepts only
paths under `DATA_DIR`. The readers live in `worker/corpus/` (this module stays light: the API
process imports it).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.schemas.common import CONTROLLER_NAME, MAX_COUNT, Seed
from core.schemas.puzzles import PuzzleSource

# Bounds on lists a spec may name: far above any real corpus, low enough that validating and
# storing a spec stays cheap.
MAX_SOURCES, MAX_NAMES, MAX_MAP = 64, 1000, 100_000
Name = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        description="The source's name, unique in the corpus: its rows' default run, and the key "
        "of `knobs.source_mix`.",
    ),
]
# A controller's name (core/controllers.py's rule).
# A data set's name (core/datasets.py): its folder DATA_DIR/datasets/<name>/.
DATASET_NAME = r"^[a-z0-9][a-z0-9._-]{0,63}$"
PATH_HELP = "a file or folder under DATA_DIR; with dataset, one inside the data set (default: all)"


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LogFiles(StrictModel):
    """A source of log files names them by `path`, or by `dataset`: a data set pushed with
    `trm data push` (`trm data list`), whose folder the API fills in as the path (`path`, if
    given too, is then relative inside the data set)."""

    path: str = Field(default="", max_length=4096, description=PATH_HELP)
    dataset: str | None = Field(
        default=None,
        pattern=DATASET_NAME,
        description="a data set's name (trm data list): its folder DATA_DIR/datasets/NAME/ is read",
    )

    @model_validator(mode="after")
    def _path_or_dataset(self) -> LogFiles:
        if self.dataset is None and not self.path:
            raise ValueError("give path (under DATA_DIR) or dataset (a data set's name)")
        return self


class TrmPlayRootSource(LogFiles):
    """`<path>/worlds/*/trm_traces.jsonl`, the play logs of an AICOO/TRM setup (or `trm envs`)."""

    type: Literal["trm_play_root"] = Field(description="An AICOO/TRM play root.")
    name: Name
    pick_base: Literal[0, 1] = Field(
        default=0,
        description='What "PICK n" counts candidates from: 0 (the original traces) or 1; a row '
        "may override it with its own `pick_base`.",
    )
    run: str | None = Field(
        default=None,
        description="Run name for every row that names none; null: the source name.",
    )


class JsonlSource(LogFiles):
    """A JSONL file (or a folder of `*.jsonl`): rows already normalized, or reasoning traces
    mapped field by field (dotted paths such as `obs.position`)."""

    type: Literal["jsonl"] = Field(description="A JSONL file or folder of them.")
    name: Name
    mode: Literal["normalized", "reasoning_trace"] = Field(
        default="normalized",
        description="`normalized`: each row already has state, tools and action; "
        "`reasoning_trace`: they are read from the fields below.",
    )
    state_fields: list[str] = Field(
        default_factory=list,
        max_length=MAX_NAMES,
        description="reasoning_trace: dotted paths whose values make the state, each under its "
        "last part (the full path when two collide).",
    )
    tools_field: str | None = Field(
        default=None, description="reasoning_trace: dotted path of a row's candidate list."
    )
    tools_default: list[str] | None = Field(
        default=None,
        max_length=MAX_NAMES,
        description="reasoning_trace: the candidates of a row without `tools_field`.",
    )
    tags_field: str | None = Field(
        default=None,
        description="reasoning_trace: dotted path of a list beside the tools, one shared tag each "
        "(`options.tags`): what `namespace_normalization: auto` maps the ids to.",
    )
    action_field: str | None = Field(
        default=None, description="reasoning_trace: dotted path of the action taken."
    )
    action_default: str | None = Field(
        default=None,
        description="reasoning_trace: the action of a row without `action_field`.",
    )
    meta_fields: list[str] | dict[str, str] = Field(
        default_factory=list,
        max_length=MAX_NAMES,
        description="reasoning_trace: fields copied into each row's meta: a list of dotted paths "
        "(meta key = last part) or {meta_key: dotted_path}.",
    )

    @model_validator(mode="after")
    def _mapping_fits_mode(self) -> JsonlSource:
        mapped = (
            self.state_fields
            or self.tools_field
            or self.tools_default
            or self.tags_field
            or self.action_field
            or self.action_default
        )
        if self.mode == "normalized" and mapped:
            raise ValueError(
                "state_fields/tools_field/tools_default/tags_field/action_field/action_default "
                "apply to "
                "mode 'reasoning_trace' only; normalized rows carry state, tools, action"
            )
        if self.mode == "reasoning_trace":
            if not self.state_fields:
                raise ValueError("mode 'reasoning_trace' needs state_fields (dotted paths)")
            if not (self.tools_field or self.tools_default):
                raise ValueError("mode 'reasoning_trace' needs tools_field or tools_default")
            if not (self.action_field or self.action_default):
                raise ValueError("mode 'reasoning_trace' needs action_field or action_default")
        return self


class RouterJsonlSource(LogFiles):
    """Router rows: `input.prompt_text`, `output.{route, intent, adapter_id, expert_id,
    prompt_family, tool_caps, rationale}`."""

    type: Literal["router_jsonl"] = Field(description="Router rows.")
    name: Name
    routes: list[str] | None = Field(
        default=None,
        max_length=MAX_NAMES,
        description="The candidate routes of every row; null: every route seen in this source, "
        "sorted.",
    )


class RouteLlmSource(StrictModel):
    """RouteLLM's evaluation labels (Ong et al. 2024, arXiv 2406.18665): whether a weak model
    (Mixtral-8x7B-Instruct) and a strong one (GPT-4-1106) answered each MMLU / GSM8K prompt right.
    One row per prompt: state = the prompt and both models' prices, tools = [weak, strong],
    action = `strong` only when the strong model alone is right."""

    type: Literal["routellm"] = Field(description="RouteLLM's evaluation labels.")
    name: Name
    path: str = Field(
        max_length=4096,
        description="A lm-sys/RouteLLM checkout: its root, `routellm/evals`, or a folder holding "
        "`mmlu/` and `gsm8k/`.",
    )
    benchmarks: list[Literal["mmlu", "gsm8k"]] = Field(
        default=["mmlu", "gsm8k"],
        min_length=1,
        max_length=2,
        description="The benchmarks read; one row per prompt.",
    )
    drop_contaminated: bool = Field(
        default=True,
        description="Drop the prompts RouteLLM's own evaluation drops "
        "(`<benchmark>/contaminated_prompts.jsonl`); the file must be there.",
    )
    weak_price: float = Field(
        default=0.24,
        ge=0,
        description="The weak model's price, USD per million tokens (the paper's Mixtral-8x7B "
        "figure); part of each row's state.",
    )
    strong_price: float = Field(
        default=24.7,
        ge=0,
        description="The strong model's price, USD per million tokens (the paper's GPT-4 "
        "figure); part of each row's state.",
    )


class JobShopGenerate(StrictModel):
    """Random job-shop instances to generate (Taillard's kind: every job visits every machine
    once in a random order, uniform durations), `count` of them, the sizes drawn per instance
    from the ranges; seeded, so the same knobs write the same files."""

    count: int = Field(default=40, ge=1, le=1000, description="Instances written.")
    jobs: tuple[int, int] = Field(
        default=(6, 15), description="[low, high] jobs per instance (1 to 50)."
    )
    machines: tuple[int, int] = Field(
        default=(5, 15), description="[low, high] machines per instance (1 to 20)."
    )
    durations: tuple[int, int] = Field(
        default=(1, 99), description="[low, high] of an operation's duration (0 to 1000)."
    )
    seed: Seed = Field(default=0, description="Seeds the instances drawn.")

    @model_validator(mode="after")
    def _ranges(self) -> JobShopGenerate:
        for field, (low, high), top in (
            ("jobs", self.jobs, 50),
            ("machines", self.machines, 20),
            ("durations", self.durations, 1000),
        ):
            floor = 0 if field == "durations" else 1
            if not floor <= low <= high <= top:
                raise ValueError(
                    f"{field} must be a range [low, high], {floor} <= low <= high "
                    f"<= {top} (got [{low}, {high}])"
                )
        return self


class JobShopSource(StrictModel):
    """Job-shop dispatching rows (worker/external/jobshop_source.py): every instance file of
    `path` (Taillard / OR-Library text) solved by CP-SAT within `solve_seconds` each, its
    schedule replayed as dispatching decisions. With `generate`, the instances are first
    written to `path` (created). Solutions are cached in `<path>/solutions/`. The work is
    bounded: at most 1000 instance files, each solve within twice `solve_seconds` of wall
    time, and generation asks for at most 7200 s of solving."""

    type: Literal["jobshop"] = Field(description="Job-shop dispatching rows.")
    name: Name
    path: str = Field(
        max_length=4096,
        description="A folder of instance files (Taillard / OR-Library text); created with "
        "`generate`.",
    )
    generate: JobShopGenerate | None = Field(
        default=None,
        description="Random instances to write to `path` first; null: read the files there.",
    )
    solve_seconds: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="CP-SAT's time per instance, in seconds: longer finds better schedules to "
        "imitate.",
    )
    scheme: Literal["active", "non_delay"] = Field(
        default="active",
        description="The dispatching scheme the rows are replayed under: `active` "
        "(Giffler-Thompson) or `non_delay`; a policy must be rolled out under the scheme it "
        "learned.",
    )

    @model_validator(mode="after")
    def _bounded(self) -> JobShopSource:
        count = self.generate.count if self.generate else 0
        if count * self.solve_seconds > 7200:
            raise ValueError(
                f"generate.count x solve_seconds must stay within 7200 s of "
                f"solving (got {count} x {self.solve_seconds})"
            )
        return self


# The BFCL categories whose every row is one function call or none (worker/external/bfcl.py).
BfclCategory = Literal[
    "multiple",
    "live_multiple",
    "irrelevance",
    "live_irrelevance",
    "simple_python",
    "simple_java",
    "simple_javascript",
    "live_simple",
]


def bfcl_data_folder() -> str | None:
    """The installed bfcl-eval package's `data` folder, found without importing the package (it
    is installed without its dependencies, so importing it may fail); None when not installed."""
    try:
        spec = importlib.util.find_spec("bfcl_eval")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / "data").is_dir():
            return str(Path(location) / "data")
    return None


class BfclSource(StrictModel):
    """The Berkeley Function Calling Leaderboard's questions (`BFCL_v4_<category>.json`, JSON
    lines) and answers (`possible_answer/`): which offered function to call, or none. `path` is a
    folder holding them (a checkout's `bfcl_eval/data`); left out, the installed bfcl-eval
    package's data folder (`pip install --no-deps bfcl-eval`) is filled in."""

    type: Literal["bfcl"] = Field(description="BFCL questions and answers.")
    name: Name
    path: str = Field(
        max_length=4096,
        description="A folder holding BFCL_v4_*.json and possible_answer/; left out: the "
        "installed bfcl-eval package's data folder.",
    )
    categories: list[BfclCategory] = Field(
        default=["multiple", "live_multiple", "irrelevance", "live_irrelevance"],
        min_length=1,
        max_length=8,
        description="The BFCL categories read (each row one function call or none).",
    )

    @model_validator(mode="before")
    @classmethod
    def _installed_data(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("path") is None:
            folder = bfcl_data_folder()
            if folder is None:
                raise ValueError(
                    "bfcl: no path given and the bfcl-eval package is not installed; install "
                    "its data with `pip install --no-deps bfcl-eval`, or set path to a folder "
                    "holding BFCL_v4_*.json and possible_answer/"
                )
            data = {**data, "path": folder}
        return data


class DecisionLogSource(StrictModel):
    """A named controller's logged decisions (core/decisions.py), read from the database: one row
    per decision with a reported outcome, state and tools as decided, action = the action the
    controller chose, the outcome in meta (`success`, `reward`); env and run =
    `<controller>@v<version>`, episode = the decision id. `outcomes`: `success_only` keeps the
    decisions that succeeded; `all` keeps the failed ones too, as negatives (critic.jsonl, never
    imitated). Decisions with no outcome yet are left out (counted)."""

    type: Literal["decision_log"] = Field(description="A controller's logged decisions.")
    name: Name
    controller: str = Field(
        pattern=CONTROLLER_NAME,
        max_length=64,
        description="The controller whose decisions are read.",
    )
    versions: list[Annotated[int, Field(ge=1, le=2**31 - 1)]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_NAMES,
        description="Only these versions' decisions; null: every version's.",
    )
    outcomes: Literal["success_only", "all"] = Field(
        default="success_only",
        description="`success_only` keeps the decisions that succeeded; `all` keeps the failed "
        "ones too, as negatives (critic.jsonl, never imitated).",
    )
    max_rows: int = Field(
        default=100_000,
        ge=1,
        le=MAX_COUNT,
        description="Decisions read at most, the newest first.",
    )

    @property
    def path(self) -> str:
        """What the manifest and the card name as this source's origin (it has no file)."""
        return f"decision_log:{self.controller}"


Source = Annotated[
    TrmPlayRootSource
    | JsonlSource
    | RouterJsonlSource
    | RouteLlmSource
    | JobShopSource
    | BfclSource
    | DecisionLogSource
    | PuzzleSource,
    Field(discriminator="type"),
]
