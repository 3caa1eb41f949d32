"""Counterexample search against the seeded defects of the flask-to-starlette task.

For the oracle and each seeded defect, runs the HTTP counterexample-search probe
over every Bookshop request space with a fixed budget per space, and prints per
defect whether a confirmed (shrunk, reproduced three times) counterexample was
found, in which space, its size and the time taken. Usage:

    python benchmarks/counterexamples.py [--sandbox none|bwrap] [--max-examples 200]
        [--seconds 60] [--seed 0] [--only NAME,...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmark_adapter.defects import apply_defect  # noqa: E402
from benchmark_adapter.sweep import load_defects  # noqa: E402
from benchmarks.bookshop_spaces import SIDES, SPACES  # noqa: E402
from probes.context import make_context  # noqa: E402
from probes.services.search import counterexample_probe  # noqa: E402

TASK = ROOT / "tasks" / "flask-to-starlette"
ORACLE = TASK / "solution" / "app"


def bookshop_defects():
    path = ROOT / "tests" / "benchmark_adapter" / "defects" / "flask_to_starlette.py"
    return load_defects(path)


def search(candidate: Path, args) -> dict:
    ctx = make_context(TASK, candidate, sandbox_kind=args.sandbox)
    probe = counterexample_probe(
        "http", SIDES, SPACES, max_examples=args.max_examples, seconds=args.seconds, seed=args.seed
    )
    start = time.monotonic()
    try:
        results = probe(ctx)
    finally:
        ctx.close()
    row = {"seconds": round(time.monotonic() - start, 1), "spaces": {}}
    for result in results:
        if result.property.id.startswith("search:"):
            obs = result.observations
            row["spaces"][result.property.id.split(":", 2)[2]] = {
                "outcome": str(result.outcome),
                "size": obs.get("size"),
                "evaluations": obs.get("evaluations"),
                "seconds": round(obs.get("seconds", 0.0), 1),
                "input": obs.get("input"),
                "differences": obs.get("differences", [])[:2],
            }
    found = [(name, s) for name, s in row["spaces"].items() if s["outcome"] == "violated"]
    row["found"] = bool(found)
    if found:
        name, best = min(found, key=lambda item: item[1]["size"])
        row.update(
            space=name, size=best["size"], input=best["input"], time_to_first=best["seconds"]
        )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandbox", default="none", choices=["none", "bwrap"])
    parser.add_argument("--max-examples", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="")
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    defects = bookshop_defects()
    if args.only:
        wanted = set(args.only.split(","))
        defects = [d for d in defects if d.name in wanted]
    print(
        f"budget per space: {args.max_examples} generated inputs, {args.seconds:.0f}s (shrinking included); "
        f"{len(SPACES)} spaces; sandbox {args.sandbox}; seed {args.seed}"
    )
    rows = {}
    oracle = search(ORACLE, args)
    rows["(oracle)"] = oracle
    print(
        f"{'(oracle)':28s} counterexample={'yes' if oracle['found'] else 'no':3s} time={oracle['seconds']}s"
    )
    with tempfile.TemporaryDirectory(prefix="twin-cx-") as tmp:
        for defect in defects:
            candidate = apply_defect(ORACLE, defect, Path(tmp) / defect.name)
            row = search(candidate, args)
            rows[defect.name] = row
            detail = (
                f"space={row['space']:8s} size={row['size']:4d} chars first-found={row['time_to_first']}s"
                if row["found"]
                else ""
            )
            print(
                f"{defect.name:28s} counterexample={'yes' if row['found'] else 'no':3s} "
                f"time={row['seconds']}s {detail}",
                flush=True,
            )
            if row["found"]:
                print(f"{'':28s}   {json.dumps(row['input'])}")
    caught = sum(rows[d.name]["found"] for d in defects)
    print(
        f"found a confirmed shrunk counterexample for {caught}/{len(defects)} seeded defects "
        f"({100.0 * caught / max(1, len(defects)):.0f}%); oracle: "
        f"{'counterexample found (oracle diverges!)' if oracle['found'] else 'none found'}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
