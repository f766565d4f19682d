"""Lower layers never import higher ones: the package's stages read bottom-up, and a change in a later
stage cannot break an earlier one. Every import in every module counts, including those inside functions.
Stages talk through tables (``datamind.tables``), never through a sibling stage's module, and no two modules
import each other, directly or round a circle. What every stage runs (the agent, its protocol, policies and
answer grading) lives on its own floor below the stages (``datamind.agent``), so no stage package imports
another stage package at all."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "include" / "datamind"

# Bottom to top; a module may import its own layer and the layers below it.
LAYERS = [
    {
        "ids",
        "categories",
        "roles",
        "grounding",
        "references",  # whether a reference program computes its answer, and answers known before any analysis
        "data_source",  # how a program reads a table's file (synthesis' references and the offline expert)
        "phrasing",  # how a question is worded and whether an answer has the form it asks for (synthesis, audit)
        "settings",
        "storage",
        "schemas",
        "shards",
        "tables",
        "assets",
        "vocabulary",
        "progress",
        "stage_params",
        "stages",
        "templating",  # the one Jinja environment of every HTML page (quality reports, the viewer)
    },
    {
        "llm",
        "sandbox",
        "quality",
        "formats",  # a file's format, its tables and their reloads, in the capped parser child (stages read files)
        "benchmarks",  # the benchmark suites on disk (evaluation scores on them, decontamination keeps them out)
        "decontamination",  # benchmark files and questions kept out of the data (ingestion and synthesis)
    },
    {"agent"},  # the one agent every stage runs: protocol, loop, policies, runner, tasks, answer grading
    {"ingest"},
    {"profile"},
    {"synth"},
    {"rollout"},
    {"judge"},
    {"filters"},
    {"publish"},
    {"train"},
    {"evaluate"},
    {"pipeline", "report_cli", "review", "stage_settings"},
]
LEVEL = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _top(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "datamind" and len(parts) > 1 else None


def test_every_package_part_has_a_layer():
    parts = {p.stem if p.is_file() else p.name for p in PKG.iterdir() if not p.name.startswith("__")}
    parts = {p for p in parts if (PKG / p).is_dir() or (PKG / f"{p}.py").is_file()}
    assert parts <= set(LEVEL), sorted(parts - set(LEVEL))


def test_no_module_imports_a_higher_layer():
    violations = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        own = rel.parts[0].removesuffix(".py")
        if own not in LEVEL:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                top = _top(name)
                if top in LEVEL and LEVEL[top] > LEVEL[own]:
                    violations.append(f"{rel}:{node.lineno} ({own}) imports {name} ({top})")
    assert not violations, "\n".join(violations)


PLUGIN = PKG.parents[1] / "plugins" / "datamind_airflow"


def _runtime_imports(path: Path, module: str, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``module`` (at ``path``) imports when it runs: ``if TYPE_CHECKING:``
    blocks are annotations. ``from pkg import name`` imports ``pkg.name`` when that is a module, else ``pkg``."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and getattr(block.test, "id", "") == "TYPE_CHECKING"
        for stmt in block.body
        for n in ast.walk(stmt)
    }
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            out.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
    return (out & modules) - {module}


def _modules() -> dict[str, Path]:
    out = {}
    for folder in (PKG, PLUGIN):
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder.parent).with_suffix("")
            out[".".join(rel.parts).removesuffix(".__init__")] = path
    return out


def test_no_import_circles():
    """Tarjan's strongly connected components over runtime imports between the package's and the plugin's
    modules: a component of more than one module is a circle."""
    mods = _modules()
    graph = {name: _runtime_imports(path, name, set(mods)) for name, path in mods.items()}
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, circles


def test_no_stage_imports_a_sibling_stage_module():
    """A stage's ``stage`` module (the one that writes its table) is imported by its own package's DAG only:
    other stages read that table through ``datamind.tables``."""
    violations = []
    for path in sorted(PKG.rglob("*.py")):
        own = path.relative_to(PKG).parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                parts = name.split(".")
                if len(parts) >= 3 and parts[0] == "datamind" and parts[2] == "stage" and parts[1] != own:
                    violations.append(f"{path.relative_to(PKG)}:{node.lineno} imports {name}")
    assert not violations, "\n".join(violations)


# The packages of the pipeline's stages (a DAG each); ``filters`` (rules the publisher applies) is a library
# on the stages' floors, not a stage.
STAGE_PACKAGES = ["ingest", "profile", "synth", "rollout", "judge", "publish", "train", "evaluate"]
STAGE_FLOOR_LIBRARIES = {"filters"}


def _stage_crossings() -> dict[tuple[str, str], list[str]]:
    """(importing stage package, imported module) -> where, for every import of any module of a stage package
    (inside functions too) that names a module of another stage package."""
    out: dict[tuple[str, str], list[str]] = {}
    for own in STAGE_PACKAGES:
        for path in sorted((PKG / own).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                for name in names:
                    parts = name.split(".")
                    if parts[0] == "datamind" and len(parts) > 1 and parts[1] in STAGE_PACKAGES and parts[1] != own:
                        out.setdefault((own, name), []).append(f"{path.relative_to(PKG)}:{node.lineno}")
    return out


def test_every_package_on_the_stages_floors_is_a_stage_or_a_named_library():
    """A new package between the agent and the top is either a stage (and kept apart from the others) or
    said to be a library; a stage renamed away would otherwise leave the test below with nothing to check."""
    first, top = LEVEL["ingest"], LEVEL["pipeline"]
    between = {name for name, level in LEVEL.items() if first <= level < top}
    assert between == set(STAGE_PACKAGES) | STAGE_FLOOR_LIBRARIES
    assert all((PKG / name).is_dir() for name in STAGE_PACKAGES)
    assert LEVEL["agent"] < first


def test_no_stage_package_imports_another_stage_package():
    """Any module of a stage imports no module of another stage: what two stages share lives below them
    (``agent``, the services, the foundations), and what a stage produced is read as a table."""
    crossings = _stage_crossings()
    assert not crossings, "\n".join(
        f"{where} ({own}) imports {mod}" for (own, mod), v in crossings.items() for where in v
    )


# Reading a table by name goes through ``datamind.tables`` (``read``, ``each``, ``key_paths``, ``release_rows``),
# which applies the commit markers and the planners' hints; the shard store's own readers are for the table
# layer. These modules read a folder their own stage wrote, or, for cost, every file some stage paid for.
SHARD_READERS = {"read_table", "read_rows", "shard_paths"}
OWN_FOLDER_READERS = {
    "ingest/stage.py": "catalog/files, which ingestion writes",
    "ingest/kaggle_stage.py": "catalog/files, which ingestion writes",
    "publish/stage.py": "the releases publishing wrote (which one holds a sample)",
    "publish/changes.py": "a release publishing wrote, its part files only",
    "publish/audit.py": "a release publishing wrote",
    "publish/cost.py": "every query and trajectory file, committed or not: each was paid for",
}


def _shard_readers() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for own in [*STAGE_PACKAGES, "agent"]:
        for path in sorted((PKG / own).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module == "datamind.shards":
                    names = sorted(a.name for a in node.names if a.name in SHARD_READERS)
                    if names:
                        out.setdefault(str(path.relative_to(PKG)), []).append(f"{node.lineno}: {', '.join(names)}")
    return out


def test_stages_read_tables_by_name_through_the_table_layer():
    """A stage or the agent reading another stage's table calls ``tables.read`` (the rows that count: commit
    markers applied, hints followed), never the shard store's readers, so whether an uncommitted file counts
    is decided in one place."""
    readers = _shard_readers()
    stray = {k: v for k, v in readers.items() if k not in OWN_FOLDER_READERS}
    assert not stray, "\n".join(f"{k}:{line}" for k, v in stray.items() for line in v)
    gone = set(OWN_FOLDER_READERS) - set(readers)
    assert not gone, f"no longer reading shards directly, strike from OWN_FOLDER_READERS: {sorted(gone)}"
