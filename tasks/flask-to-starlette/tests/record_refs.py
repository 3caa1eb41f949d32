"""Record the original's answers to every case in cases.json (for task authors; needs Flask).

    python tests/record_refs.py            # writes tests/refs/responses.json

The original in environment/source is served by Flask's own server on a loopback
port and asked with the grader's driver, so recorded and graded requests are
byte-identical on the wire. Absolute times (cookie Expires) are kept as recorded;
the grader does not compare them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "environment" / "source"
sys.path.insert(0, str(HERE))
from serving import DRIVER  # noqa: E402


def main() -> int:
    cases = json.loads((HERE / "cases.json").read_text())
    names = [c["name"] for c in cases]
    if len(set(names)) != len(names):
        raise SystemExit("cases.json: case names must be unique")
    scratch = Path(tempfile.mkdtemp(prefix="bookshop-record-"))
    try:
        (scratch / "driver.py").write_text(DRIVER)
        config = {"cases": cases, "app": str(SOURCE), "startup_s": 30.0, "log": str(scratch / "server.log"),
                  "out": str(scratch / "answers.json"),
                  "server": ["{python}", "-m", "flask", "--app", "app", "run", "--port", "{port}"]}
        (scratch / "config.json").write_text(json.dumps(config))
        subprocess.run([sys.executable, str(scratch / "driver.py"), str(scratch / "config.json")], check=True,
                       timeout=300)
        answers = json.loads((scratch / "answers.json").read_text())
        if not answers["up"] or set(answers["answers"]) != set(names):
            raise SystemExit(f"the original did not answer every case:\n{(scratch / 'server.log').read_text()[-2000:]}")
        errors = {n: a["error"] for n, a in answers["answers"].items() if "error" in a}
        if errors:
            raise SystemExit(f"requests failed: {errors}")
        (HERE / "refs").mkdir(exist_ok=True)
        (HERE / "refs" / "responses.json").write_text(json.dumps(answers["answers"], indent=1, sort_keys=True))
        print(f"recorded {len(names)} answers")
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
