"""What twin costs against the base scaffold when both are handed the same replies.

For each bundled recording (`examples/<task>/twin.jsonl` and `base.jsonl`), the recorded
assistant turns are handed back, in order, to a fresh run of today's twin (prompts, tools,
context policy) as a scripted model, so the prompts measured are the ones twin sends now,
not the ones of the recording. Per scaffold it prints model calls, prompt tokens (estimated
with litellm's tokenizer where the replies report none, as the recordings' scripted replies
do), the share of prompt tokens a provider prefix cache could serve (each call's leading
messages identical to the previous call of the same role turn, tools included), wall time,
and the twin/base prompt-token ratio; per role, where the prompt tokens go (system prompt,
tool schemas, task message, earlier replies, earlier tool outputs). The recorded grades
(`examples/<task>/*.grades.json`) say whether both solve. Replies are the bundled scripted
demonstrations, not a model's work.

    .venv/bin/python benchmarks/cost.py [TASK ...] [--out benchmarks/results/cost.json]
    .venv/bin/python benchmarks/cost.py --table benchmarks/results/cost.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evidence_store import numbers  # noqa: E402
from ground.trajectory import ModelCallRecord, Trajectory  # noqa: E402
from harness.models.litellm_client import estimate_usage  # noqa: E402
from harness.run.directory import RunConfig  # noqa: E402
from harness.run.migration import run_migration  # noqa: E402
from harness.run.session import RunInputs  # noqa: E402
from harness.scaffolds import registry  # noqa: E402
from task_model.loader import load_task  # noqa: E402

TASKS = REPO / "tasks" / "t2j-mini"
EXAMPLES = REPO / "examples"
SCAFFOLDS = ("twin", "base")


def scripted_replies(recording: Path) -> list[dict]:
    """The recording's assistant turns in the `scripted:` format, without their token counts."""
    replies = []
    for call in Trajectory(recording).model_calls():
        reply = call.reply
        replies.append(
            {
                "content": reply.content,
                "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in reply.tool_calls],
            }
        )
    return replies


def prompt_tokens(call: ModelCallRecord) -> int:
    return call.reply.usage.prompt_tokens


def cacheable_tokens(calls: list[ModelCallRecord]) -> int:
    """Prompt tokens each call shares, as a leading run of identical messages, with the previous
    call of the same role turn: what a provider's prefix cache could serve (tools come first)."""
    total, previous = 0, None
    for call in calls:
        messages = call.request.messages
        if previous is not None and (previous.round, previous.role) == (call.round, call.role):
            before = previous.request.messages
            shared = 0
            while shared < min(len(before), len(messages)) and before[shared] == messages[shared]:
                shared += 1
            if shared:
                total += estimate_usage(messages[:shared], call.request.tools, "").prompt_tokens
        previous = call
    return total


KINDS = ("system", "tools", "task", "replies", "tool outputs", "other")
"""What a prompt's tokens are spent on: the system prompt, the tool schemas, the task message
(instruction, diagnosis, evidence), the model's own earlier replies (tool-call arguments
included), earlier tool outputs, and anything else (the loop's nudges)."""


def message_kind(message: dict, index: int) -> str:
    role = message.get("role")
    if role == "system":
        return "system"
    if role == "user":
        return "task" if index == 1 else "other"
    return {"assistant": "replies", "tool": "tool outputs"}.get(str(role), "other")


def tokens_by_kind(calls: list[ModelCallRecord]) -> dict[str, dict[str, int]]:
    """Per role, the prompt tokens of every call split by `KINDS`. Each part is counted on its own,
    with its own framing, so the parts add up to about the calls' totals, not exactly."""
    counted: dict[str, int] = {}

    def count(messages: list, tools: list | None) -> int:
        key = json.dumps([messages, tools], sort_keys=True)
        if key not in counted:
            counted[key] = estimate_usage(messages, tools, "").prompt_tokens
        return counted[key]

    empty = [{"role": "user", "content": ""}]
    split: dict[str, Counter] = {}
    for call in calls:
        into = split.setdefault(call.role, Counter())
        if call.request.tools:
            into["tools"] += count(empty, call.request.tools) - count(empty, None)
        for i, message in enumerate(call.request.messages):
            into[message_kind(message, i)] += count([message], None)
    return {role: {kind: parts[kind] for kind in KINDS if parts[kind]} for role, parts in sorted(split.items())}


def measure(task: str, scaffold: str, root: Path) -> dict:
    recording = EXAMPLES / task / f"{scaffold}.jsonl"
    script = root / f"{task}-{scaffold}.json"
    script.write_text(json.dumps(scripted_replies(recording)))
    config = RunConfig.build(task=TASKS / task, model=f"scripted:{script}", scaffold=scaffold, rounds=2, grade=False)
    inputs = RunInputs.create(root / "runs", config, load_task(TASKS / task), f"{task}-{scaffold}")
    started = time.monotonic()
    run_migration(inputs, registry.SCAFFOLDS)
    wall = time.monotonic() - started
    calls = Trajectory(inputs.run.trajectory).model_calls()
    prompt = sum(prompt_tokens(c) for c in calls)
    grades = json.loads((EXAMPLES / task / f"{scaffold}.grades.json").read_text())
    return {
        "task": task,
        "scaffold": scaffold,
        "calls": len(calls),
        "by_role": {role: sum(c.role == role for c in calls) for role in sorted({c.role for c in calls})},
        "prompt_tokens_by_role": {
            role: sum(prompt_tokens(c) for c in calls if c.role == role) for role in sorted({c.role for c in calls})
        },
        "first_prompt_tokens_by_role": {
            role: next(prompt_tokens(c) for c in calls if c.role == role) for role in sorted({c.role for c in calls})
        },
        "prompt_tokens_by_kind": tokens_by_kind(calls),
        "prompt_tokens": prompt,
        "completion_tokens": sum(c.reply.usage.completion_tokens for c in calls),
        "estimated": any(c.reply.usage.estimated for c in calls),
        "cacheable_tokens": cacheable_tokens(calls),
        "wall_s": round(wall, 1),
        "final_reward_recorded": grades[max(grades, key=int)],
        "stop_reason": inputs.run.load_state().stop_reason,
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| task | scaffold | calls | prompt tokens | cacheable share | wall s | recorded final reward "
        "| twin/base prompt tokens |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by_key = {(r["task"], r["scaffold"]): r for r in rows}
    for r in rows:
        ratio = ""
        base = by_key.get((r["task"], "base"))
        if r["scaffold"] == "twin" and base and base["prompt_tokens"]:
            ratio = f"{r['prompt_tokens'] / base['prompt_tokens']:.2f}"
        mark = "~" if r["estimated"] else ""
        share = r["cacheable_tokens"] / r["prompt_tokens"] if r["prompt_tokens"] else 0.0
        lines.append(
            f"| {r['task']} | {r['scaffold']} | {r['calls']} | {mark}{r['prompt_tokens']:,} | {share:.0%} "
            f"| {r['wall_s']:.0f} | {numbers.reward(r['final_reward_recorded'])} | {ratio} |"
        )
    if any(r["estimated"] for r in rows):
        lines.append("\n~ estimated with litellm's token counter (the scripted replies report no usage).")
    return "\n".join(lines)


def kinds_table(rows: list[dict]) -> str:
    """Per task, scaffold and role: calls, prompt tokens, and where they go (`KINDS`)."""
    lines = [
        "| task | scaffold | role | calls | prompt tokens | first prompt | " + " | ".join(KINDS) + " |",
        "|---|---|---|---|---|---|" + "---|" * len(KINDS),
    ]
    for r in rows:
        for role, parts in r.get("prompt_tokens_by_kind", {}).items():
            cells = " | ".join(f"{parts.get(kind, 0):,}" for kind in KINDS)
            lines.append(
                f"| {r['task']} | {r['scaffold']} | {role} | {r['by_role'][role]} "
                f"| {r['prompt_tokens_by_role'][role]:,} | {r['first_prompt_tokens_by_role'][role]:,} | {cells} |"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="*", default=sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir()))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--table", type=Path, default=None, help="print the table of recorded results; run nothing")
    args = parser.parse_args(argv)
    if args.table is not None:
        rows = json.loads(args.table.read_text())
        print(table(rows) + "\n\n" + kinds_table(rows))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="twin-cost-") as tmp:
        for task in args.tasks:
            for scaffold in SCAFFOLDS:
                rows.append(measure(task, scaffold, Path(tmp)))
                print(json.dumps(rows[-1]), file=sys.stderr)
    print(table(rows) + "\n\n" + kinds_table(rows))
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
