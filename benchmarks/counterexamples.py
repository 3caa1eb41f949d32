"""How many flask-to-starlette seeded defects `twin probe` alone catches with a reproduced counterexample.

For the oracle and each seeded defect (`tests/benchmark_adapter/defects/flask_to_starlette.py`),
runs `twin probe --json` on the candidate, exactly as a user would: the built-in checks and
the task's own probe file (`tasks/flask-to-starlette/tests/probes/http.py`: matched requests
and a counterexample search over each request space, both services in their own sandboxes).
A defect counts as caught when a search found a counterexample that was shrunk and then
reproduced three times on a stable original (`search:http:*` violated). Prints one line per
candidate and the share caught. Usage:

    python benchmarks/counterexamples.py [--sandbox none|bwrap] [--max-examples 100]
        [--seconds 60] [--seed 0] [--only NAME,...] [--start N] [--limit N] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmark_adapter.grading.defects import apply_defect  # noqa: E402
from benchmark_adapter.grading.sweep import load_defects  # noqa: E402

TASK = ROOT / "tasks" / "flask-to-starlette"
ORACLE = TASK / "solution" / "app"


def bookshop_defects():
    return load_defects(ROOT / "tests" / "benchmark_adapter" / "defects" / "flask_to_starlette.py")


def probe(candidate: Path, args) -> dict:
    """`twin probe --json` on one candidate; what it says, condensed."""
    argv = [
        sys.executable,
        "-m",
        "harness.cli.app",
        "probe",
        "--task",
        str(TASK),
        "--candidate",
        str(candidate),
        "--sandbox",
        args.sandbox,
        "--json",
        "--search-examples",
        str(args.max_examples),
        "--search-seconds",
        str(args.seconds),
        "--search-seed",
        str(args.seed),
    ]
    start = time.monotonic()
    done = subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False
    )
    if done.returncode not in (0, 1):  # 1: a property violated, which is what is measured
        return {"error": (done.stderr or done.stdout)[-500:], "seconds": round(time.monotonic() - start, 1)}
    results = json.loads(done.stdout)["results"]
    violated = [r["property"]["id"] for r in results if r["outcome"] == "violated"]
    found = [
        r
        for r in results
        if r["property"]["id"].startswith("search:")
        and r["outcome"] == "violated"
        and r["observations"]["reproduced"] == 3
    ]
    row = {"seconds": round(time.monotonic() - start, 1), "violated": violated, "caught": bool(found)}
    if found:
        best = min(found, key=lambda r: r["observations"]["size"])
        obs = best["observations"]
        row.update(
            space=best["property"]["id"].rsplit(":", 1)[1],
            size=obs["size"],
            input=obs["input"],
            reproductions=obs.get("reproductions"),
            regression=obs.get("regression"),
        )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandbox", default="bwrap", choices=["none", "bwrap"])
    parser.add_argument("--max-examples", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="", help="comma-separated defect names")
    parser.add_argument("--start", type=int, default=0, help="skip the first N defects")
    parser.add_argument("--limit", type=int, default=0, help="at most N defects (a subset)")
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    defects = bookshop_defects()
    if args.only:
        wanted = set(args.only.split(","))
        defects = [d for d in defects if d.name in wanted]
    defects = defects[args.start : args.start + args.limit if args.limit else None]
    print(
        f"twin probe per candidate; search budget per request space: {args.max_examples} inputs, "
        f"{args.seconds:g}s; sandbox {args.sandbox}; seed {args.seed}"
    )
    rows = {"(oracle)": probe(ORACLE, args)}
    oracle = rows["(oracle)"]
    print(
        f"{'(oracle)':28s} violated={oracle.get('violated', oracle.get('error'))} time={oracle['seconds']}s", flush=True
    )
    with tempfile.TemporaryDirectory(prefix="twin-cx-") as tmp:
        for defect in defects:
            row = probe(apply_defect(ORACLE, defect, Path(tmp) / defect.name), args)
            rows[defect.name] = row
            detail = f"space={row['space']} size={row['size']}" if row.get("caught") else row.get("error", "")
            print(
                f"{defect.name:28s} caught={'yes' if row.get('caught') else 'no':3s} time={row['seconds']}s {detail}",
                flush=True,
            )
            if row.get("caught"):
                print(f"{'':28s}   {json.dumps(row['input'])}")
    caught = sum(bool(rows[d.name].get("caught")) for d in defects)
    share = 100.0 * caught / max(1, len(defects))
    verdict = "nothing violated" if oracle.get("violated") == [] else oracle.get("violated") or oracle.get("error")
    print(
        f"caught with a reproduced counterexample: {caught}/{len(defects)} seeded defects ({share:.0f}%); "
        f"oracle: {verdict}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
