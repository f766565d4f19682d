"""Lower layers never import higher ones: the package's stages read bottom-up, and a change in a later
stage cannot break an earlier one. Every import in every module counts, including those inside functions."""

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
        "settings",
        "storage",
        "schemas",
        "shards",
        "assets",
        "vocabulary",
        "progress",
        "stage_params",
        "stages",
    },
    {"llm", "sandbox", "quality"},
    {"ingest"},
    {"profile"},
    {"synth"},
    {"rollout"},
    {"judge"},
    {"filters"},
    {"publish"},
    {"train"},
    {"evaluate"},
    {"pipeline", "report_cli", "review"},
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
