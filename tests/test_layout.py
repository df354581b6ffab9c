"""The plan of the house, enforced (SPEC §2): which floor may import which, no import loops (imports
inside functions included), no module over 500 lines, and the API process free of torch and of
the worker.

Floors, bottom up: `core` (the kernel both processes stand on) → `worker` and `app`; `trm_mcp`
(the MCP server, an HTTP client of the API) stands on `core` and is mounted by `app`. In `worker`,
`models` stands under the trainers and evaluation, which stand under the kinds, which the runner
runs; the data rooms (`corpus`, `envs`) stand under all of them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "app", "worker", "trm_mcp")
MAX_LINES = 500

# (importer prefix, imported prefix, why it is refused). A prefix names a package or module.
FORBIDDEN = [
    ("core", "app", "core is the floor under the API"),
    ("core", "worker", "core is the floor under the worker"),
    ("worker", "app", "the worker stands on core, never on the API"),
    ("app", "worker", "the API never imports the worker (only its CLI may)"),
    ("core", "trm_mcp", "core is the floor under the MCP server"),
    ("worker", "trm_mcp", "the worker serves no MCP"),
    ("trm_mcp", "app", "the MCP server is a client of the API: HTTP only"),
    ("trm_mcp", "worker", "the MCP server is a client of the API: HTTP only"),
    ("worker.models", "worker.train", "models are the floor under the trainers"),
    ("worker.models", "worker.evaluate", "models are the floor under evaluation"),
    ("worker.models", "worker.kinds", "models know no kind"),
    ("worker.models", "worker.hillclimb", "models know no search"),
    ("worker.corpus", "worker.train", "data comes before training"),
    ("worker.corpus", "worker.evaluate", "data comes before evaluation"),
    ("worker.corpus", "worker.models", "data comes before models"),
    ("worker.envs", "worker.train", "environments come before training"),
    ("worker.envs", "worker.evaluate", "environments come before evaluation"),
    ("worker.envs", "worker.models", "environments come before models"),
    ("worker.train", "worker.evaluate", "trainers do not score"),
    ("worker.train", "worker.kinds", "a trainer knows no kind"),
    ("worker.evaluate", "worker.kinds", "evaluation knows no kind"),
    ("worker.hillclimb", "worker.kinds", "the search logic knows no kind"),
    ("worker.kinds", "worker.runner", "a kind is run by the runner, not the other way"),
    ("worker.kinds", "worker.main", "a kind is run by the runner, not the other way"),
]
# The CLI is the API process's one door into the worker (`trm worker`, `trm envs`, ...).
ALLOWED = [("app.cli", "worker")]


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """Our modules that `name` imports, anywhere in the file (functions included), with the
    line. `from pkg import sub` counts as importing the submodule `pkg.sub` when there is one,
    else the package itself."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if sub in known else target), node.lineno


def graph() -> dict[str, dict[str, int]]:
    known = modules()
    return {
        name: {target: line for target, line in imports_of(name, path, known) if target != name}
        for name, path in known.items()
    }


def test_no_import_runs_back_up_a_floor() -> None:
    wrong = []
    for importer, targets in graph().items():
        for target, line in targets.items():
            if any(_within(importer, a) and _within(target, b) for a, b in ALLOWED):
                continue
            for low, high, why in FORBIDDEN:
                if _within(importer, low) and _within(target, high):
                    wrong.append(
                        f"{modules()[importer].relative_to(ROOT)}:{line} imports {target}: {why}"
                    )
    assert not wrong, "\n".join(wrong)


def test_there_is_no_import_loop() -> None:
    """Tarjan's strongly connected components over every import, functions included: a loop
    hidden inside a function is still a loop. A package's `__init__` importing its own modules
    is the package's table of contents, so a module importing its own package's `__init__` is
    what would close a loop; it is counted like any other edge."""
    edges = {name: set(targets) for name, targets in graph().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops: list[list[str]] = []
    counter = 0
    sys.setrecursionlimit(10000)

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in edges:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                loops.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    assert not loops, "import loops:\n" + "\n".join(" <-> ".join(c) for c in loops)


def test_no_module_is_over_500_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in [*modules().values(), *(ROOT / "bench").glob("*.py")]
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_no_code_is_packed_past_the_formatter() -> None:
    """`ruff format` lays the code out: a module near the line cap is split by what it does,
    not packed onto fewer lines behind the formatter's skip or off markers."""
    files = [*modules().values(), *(ROOT / "bench").glob("*.py"), *(ROOT / "tests").rglob("*.py")]
    markers = ("# fmt: " + "skip", "# fmt: " + "off")
    packed = sorted(
        str(path.relative_to(ROOT))
        for path in files
        if any(marker in path.read_text() for marker in markers)
    )
    assert not packed, f"formatter markers in: {packed}"


@pytest.mark.parametrize(
    ("entry", "refused"),
    [
        ("app.main", ("torch", "transformers", "peft", "worker")),
        ("worker.main", ("torch", "transformers", "peft", "app")),
        # Every kind's file, as the worker loads each the first time it runs one.
        (
            "worker.kinds.train, worker.kinds.bench, worker.kinds.hillclimb, worker.kinds.selftest",
            ("torch", "transformers", "peft", "app"),
        ),
    ],
)
def test_processes_load_only_their_floors(entry: str, refused: tuple[str, ...]) -> None:
    """The API never loads torch or the worker; the worker process loads neither the API nor
    torch until a stage's child process trains or scores."""
    code = (
        f"import sys, {entry}; "
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(refused)!r}))"
    )
    out = _python(code)
    assert out.stdout.strip() == "[]", f"importing {entry} loaded {out.stdout.strip()}"


def test_a_stage_process_loads_only_its_own_kind() -> None:
    """`KINDS` names every kind file in worker/kinds/, each under its `KIND`'s name; a train
    stage's child process imports the train kind's code only, not the bench's or the search's."""
    from worker.kinds import KINDS

    files = {p.stem for p in (ROOT / "worker" / "kinds").glob("*.py")} - {"__init__", "base"}
    assert {name.removeprefix("worker.kinds.") for name in KINDS.modules.values()} == files
    code = (
        "import sys; from worker.kinds import KINDS; KINDS['train']; "
        "print(sorted(m for m in sys.modules if m.startswith('worker.kinds.'))); "
        "print(sorted(k.name for k in KINDS.values()))"
    )
    out = _python(code)
    loaded, names = out.stdout.splitlines()
    assert loaded == "['worker.kinds.base', 'worker.kinds.train']"
    assert names == str(sorted(KINDS))


def test_lightgbm_loads_without_its_scikit_learn_and_pandas_adapters() -> None:
    """The gbdt trainer, the gbdt policy and the trm's screen import LightGBM through
    worker/models/lgbm.py: a stage's child process skips scikit-learn, scipy.stats and pandas
    (over a second of its start), and the two packages import as usual afterwards."""
    code = (
        "import sys; from worker.models.lgbm import lightgbm; "
        "print(sorted({'sklearn', 'pandas', 'scipy.stats'} & set(sys.modules))); "
        "import sklearn, pandas; "
        "print(lightgbm.Booster.__name__, sklearn.__name__, pandas.__name__)"
    )
    out = _python(code)
    assert out.stdout.splitlines() == ["[]", "Booster sklearn pandas"]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    """`code` run by a fresh interpreter in the repository (what it imports is its own)."""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out
