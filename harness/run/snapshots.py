"""Snapshots while a run works: the candidate every K model calls and at each round's end, with what was spent.

A run's reward is known at its round ends only; a user with a budget asks what each
scaffold would have delivered at 1 M tokens. So, while the run works, the candidate is
committed as a snapshot every `RunConfig.snapshot_every` model calls (after the call's
reply, before its tool calls run: the tree holds the work of every earlier reply) and at
each round's end, with the tokens, calls, dollars and wall time spent so far. A snapshot
commit hangs off `refs/snapshots/<n>` in the candidate's git directory: the branch, the
round tags and the work tree the agent sees stay as they were (`commit_snapshot`).
A round's end reuses the round's own tag.

Each snapshot copies the candidate (up to the copy's cap, 1 GiB) and its new files stay in
the candidate's git objects, so the history has a total cap too
(`RunConfig.snapshot_history_cap_mib`): once the candidate's git objects hold that much, no
further snapshot every K calls, nor the run's end, is taken; a round's end still is (its tag
exists whatever snapshots do: it copies nothing). The stop is recorded once, in the run's
state (`RunState.snapshots_stopped`) and its audit log, and shown in `summary.md` and
`twin evidence show`; what was taken is graded as before.

After the run, `twin migrate --grade-snapshots` (and `twin bench` by default) grades them
with the task's grader, once per distinct tree (`harness.run.snapshot_grades`): the result
is the run's reward as a step curve over what it spent (`grades.json`, `snapshots`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ground.agent_tree import copy_tree, remove_tree
from harness.run.candidate_repo import GIT_EXCLUDED, CandidateRepo, CandidateRepoError, git_refused

SnapshotKind = Literal["calls", "round", "end"]


MIB = 1 << 20


class SnapshotsStopped(BaseModel):
    """Why, and from when, a run took no more snapshots every K calls: the history's total cap was reached."""

    calls: int = Field(description="Model calls spent when the first snapshot was skipped.")
    taken: int = Field(description="Snapshots taken before it.")
    cap_mib: float = Field(description="The cap (`RunConfig.snapshot_history_cap_mib`).")
    held_bytes: int = Field(description="What the candidate's git objects held then.")

    def line(self) -> str:
        """One line for the summary, the audit log and `twin evidence show`."""
        return (
            f"snapshots stopped at {self.calls} model calls: history cap {self.cap_mib:g} MiB reached "
            f"({self.held_bytes / MIB:.1f} MiB in the candidate's git objects after {self.taken} snapshots; "
            "round ends are still taken)"
        )


class Snapshot(BaseModel):
    """The candidate at one moment of a run, and what the run had spent by then."""

    index: int = Field(description="Order of the snapshot in the run, from 1.")
    kind: SnapshotKind = Field(
        description="'calls': every K model calls; 'round': a round's end (its tag); 'end': the run's end."
    )
    round: int = Field(description="The round the run was in.")
    role: str = Field(default="", description="The role whose model call was due ('' at a round's end).")
    ref: str = Field(description="The git ref of the snapshot in the candidate's git directory.")
    tree: str = Field(description="git's tree digest: equal digests are equal trees, graded once.")
    calls: int = Field(description="Model calls spent so far.")
    tokens: int = Field(description="Tokens (prompt and completion) spent so far.")
    usd: float = Field(description="Dollars spent so far.")
    wall_s: float = Field(description="Wall time of the rounds so far (docs/loop.md, 'Figures').")


def due(snapshots: list[Snapshot], calls: int, every: int) -> bool:
    """Whether a `calls` snapshot is due: `every` model calls since the last snapshot (0: never)."""
    if every <= 0 or calls <= 0:
        return False
    last = max((s.calls for s in snapshots), default=0)
    return calls - last >= every


def take(session, kind: SnapshotKind, *, round: int, role: str = "") -> Snapshot | None:
    """Commit the candidate as the session's next snapshot (a round's end: its tag), record it, save the state.

    A snapshot at the same spending and tree as the last one is not taken twice, nor one past
    the history's cap (`capped`; a round's end always is). Returns the snapshot, or None when
    none was taken.
    """
    state, repo = session.state, session.repo
    if kind == "round" and any(s.kind == "round" and s.round == round for s in state.snapshots):
        return None  # a resumed run passing a round it finished before: that round's end is taken
    spent = session.budget.spent
    try:
        if kind != "round" and capped(session, spent.calls, round):
            return None
        if kind == "round":
            ref = f"refs/tags/round-{round}"
            tree = tree_of(repo, ref)
        else:
            ref, tree = commit_snapshot(repo, len(state.snapshots) + 1, f"{kind}, round {round}, {spent.calls} calls")
    except (CandidateRepoError, OSError) as exc:  # a point of the curve is lost, never the run
        repo._audit_target(f"snapshot-{len(state.snapshots) + 1}", f"snapshot not taken: {str(exc)[:300]}")
        return None
    last = state.snapshots[-1] if state.snapshots else None
    if last is not None and last.tree == tree and last.calls == spent.calls:
        if kind != "round":
            drop_snapshot(repo, ref)  # the same point as the last: no ref left behind for it
        return None
    snapshot = Snapshot(
        index=len(state.snapshots) + 1,
        kind=kind,
        round=round,
        role=role,
        ref=ref,
        tree=tree,
        calls=spent.calls,
        tokens=spent.tokens,
        usd=spent.usd,
        wall_s=spent.wall_s,
    )
    state.snapshots.append(snapshot)
    session.save(round=round)
    return snapshot


def capped(session, calls: int, round: int) -> bool:
    """Whether the history's cap stops this snapshot: reached before (recorded then), or reached now
    (recorded once: the run's state and its audit log).

    Raises:
        CandidateRepoError: git cannot count the candidate's objects.
    """
    state = session.state
    if state.snapshots_stopped is not None:
        return True
    cap_mib = session.config.snapshot_history_cap_mib
    held = history_bytes(session.repo)
    if held < cap_mib * MIB:
        return False
    state.snapshots_stopped = SnapshotsStopped(
        calls=calls, taken=len(state.snapshots), cap_mib=cap_mib, held_bytes=held
    )
    session.repo._audit_target("snapshots", state.snapshots_stopped.line())
    session.save(round=round)
    return True


def history_bytes(repo: CandidateRepo) -> int:
    """Bytes the candidate's git objects take on disk (loose and packed): every round's and snapshot's files."""
    counted = dict(line.split(": ", 1) for line in repo._git("count-objects", "-v").splitlines() if ": " in line)
    return 1024 * sum(int(counted.get(name, "0")) for name in ("size", "size-pack"))


# The candidate repository's git runs through its `_git` (its safe configuration and environment); the
# snapshot commits live here, beside the snapshots, so that the repository keeps to the rounds.
def commit_snapshot(repo: CandidateRepo, index: int, message: str) -> tuple[str, str]:
    """Commit a checked copy of the work tree as snapshot `index`, off to the side; return (ref, tree).

    The commit is reachable only from `refs/snapshots/<index>`: the branch, its index and the
    round tags stay as they were, and the work tree is only read (as `commit_round` reads it:
    a checked copy, never git on the agent's tree).
    """
    if repo.check_written is not None:
        repo.check_written()  # files a full host disk zeroed are never committed, as for a round
    remove_tree(repo.stage)
    scratch_index = repo.git_dir / "snapshot-index"
    scratch_index.unlink(missing_ok=True)
    try:
        copy_tree(repo.work_tree, repo.stage, exclude_names=GIT_EXCLUDED, refuse_name=git_refused)
        repo._add_all(0, index=scratch_index, target=f"snapshot-{index}")  # what git refuses is left out
        tree = repo._git("write-tree", index=scratch_index)
        sha = repo._git("commit-tree", tree, "-p", "HEAD", "-m", f"snapshot {index}: {message}")
        ref = f"refs/snapshots/{index}"
        repo._git("update-ref", ref, sha)
    finally:
        remove_tree(repo.stage)
        scratch_index.unlink(missing_ok=True)
    return ref, tree


def drop_snapshot(repo: CandidateRepo, ref: str) -> None:
    """Remove a snapshot's ref (`refs/snapshots/…` only): its commit is left to git's garbage."""
    if not ref.startswith("refs/snapshots/"):
        raise CandidateRepoError(f"not a snapshot ref: {ref}")
    repo._git("update-ref", "-d", ref)


def tree_of(repo: CandidateRepo, ref: str) -> str:
    """The tree digest of a ref (a round's tag, a snapshot): equal digests, equal trees."""
    return repo._git("rev-parse", f"{ref}^{{tree}}")


class SnapshotGrade(BaseModel):
    """The task grader's reward of one snapshot: a point of the run's reward curve."""

    snapshot: Snapshot
    reward: float | None = Field(
        default=None,
        description="The grader's reward; 0 when it failed on the candidate; None when twin's own machinery "
        "failed or the snapshot could not be graded.",
    )
    error: str = Field(default="", description="Why the reward is 0 or missing.")
    same_as: str = Field(
        default="", description="Whose grade this reuses, the tree being the same: 'round 2', 'snapshot 3' or ''."
    )


AXES = ("tokens", "usd", "calls", "wall_s")
"""What a reward curve can be read over: tokens, dollars, model calls, wall time."""


def curve(grades: list[SnapshotGrade], axis: str = "tokens") -> list[tuple[float, float]]:
    """The run's reward as a step curve over `axis`: (spent, reward) at each graded snapshot, by spending.

    Between two points the reward is the earlier point's: what the run would have delivered had it
    stopped there. An ungraded snapshot (reward None) is left out, never counted as 0.
    """
    if axis not in AXES:
        raise ValueError(f"unknown axis {axis!r}: choose from {', '.join(AXES)}")
    points = [(float(getattr(g.snapshot, axis)), g.reward) for g in grades if g.reward is not None]
    return sorted(points, key=lambda p: p[0])


def curve_lines(grades: list[SnapshotGrade]) -> list[str]:
    """The run's reward curve as a markdown table (summary.md), one row per snapshot, by spending."""
    if not grades:
        return []
    lines = [
        "## Reward over what was spent (snapshots, graded after the run)",
        "",
        "A step curve: between two snapshots the reward is the earlier one's.",
        "",
        "| snapshot | kind | round | model calls | tokens | dollars | wall s | reward |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g in grades:
        s = g.snapshot
        reward = "not graded" if g.reward is None else f"{g.reward:.4f}"
        if g.same_as:
            reward += f" (same tree as {g.same_as})"
        lines.append(
            f"| {s.index} | {s.kind} | {s.round} | {s.calls} | {s.tokens:,} | {s.usd:.4f} | {s.wall_s:.1f} | {reward} |"
        )
    return lines
