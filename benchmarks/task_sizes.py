"""The size of each bundled task's original, counted from the files laid out (a declared distribution's
too, from twin's cache: run `twin task fetch` first).

    python benchmarks/task_sizes.py [TASK_DIR ...]

One row per task: Python modules, their lines, and the lines of the modules that import torch.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmark_adapter.task.loader import load_task  # noqa: E402


def imports_torch(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "torch":
            return True
    return False


def original_size(source: Path) -> dict[str, int]:
    """Modules (non-empty .py files), their lines, and the lines of those that import torch."""
    modules = [p for p in sorted(source.rglob("*.py")) if p.read_text(errors="replace").strip()]
    texts = [p.read_text(errors="replace") for p in modules]
    return {
        "modules": len(modules),
        "lines": sum(len(t.splitlines()) for t in texts),
        "torch_lines": sum(len(t.splitlines()) for t in texts if imports_torch(t)),
    }


def default_tasks() -> list[Path]:
    return sorted(p.parent for p in (REPO / "tasks").rglob("task.toml"))


def main(argv: list[str]) -> int:
    for path in [Path(a) for a in argv] or default_tasks():
        task = load_task(path)
        size = original_size(task.source_dir)
        origin = f"{task.settings.original.requirement} (declared)" if task.settings.original else "committed"
        print(f"{task.name:22s} {size['modules']:4d} modules {size['lines']:6d} lines "
              f"{size['torch_lines']:6d} using torch  {origin}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
