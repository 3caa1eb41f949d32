"""Snapshots while a run works, graded after it: the reward as a step curve over what was spent."""

from __future__ import annotations

import json
import os

import pytest

from harness.run.directory import RunConfig, RunDir, RunState
from harness.run.snapshots import Snapshot, SnapshotGrade, curve, due


def snap(index: int, calls: int, tree: str = "t", kind: str = "calls") -> Snapshot:
    return Snapshot(
        index=index, kind=kind, round=1, ref=f"refs/snapshots/{index}", tree=tree, calls=calls,
        tokens=100 * calls, usd=0.01 * calls, wall_s=2.0 * calls,
    )  # fmt: skip


def test_a_snapshot_is_due_every_k_calls_since_the_last():
    assert not due([], 7, 8)
    assert due([], 8, 8)
    assert not due([snap(1, 8)], 15, 8)
    assert due([snap(1, 8)], 16, 8)
    assert due([snap(1, 8), snap(2, 9, kind="round")], 17, 8)  # counted from the last snapshot of any kind
    assert not due([], 100, 0)  # 0: round ends only


def test_the_curve_is_sorted_by_spending_and_leaves_ungraded_snapshots_out():
    grades = [
        SnapshotGrade(snapshot=snap(2, 4), reward=0.5),
        SnapshotGrade(snapshot=snap(1, 2), reward=0.0),
        SnapshotGrade(snapshot=snap(3, 6), reward=None, error="sandbox did not start"),
    ]
    assert curve(grades, "tokens") == [(200.0, 0.0), (400.0, 0.5)]
    assert curve(grades, "calls") == [(2.0, 0.0), (4.0, 0.5)]
    assert curve(grades, "usd")[1] == (pytest.approx(0.04), 0.5)
    with pytest.raises(ValueError, match="unknown axis"):
        curve(grades, "seconds")


def light_session(tmp_path, calls: int, cap_mib: float = 4096):
    """What `snapshots.take` reads of a session: its state, config, candidate repository and budget."""
    from types import SimpleNamespace

    from harness.models.budget import Spent
    from harness.run.candidate_repo import CandidateRepo

    repo = CandidateRepo(tmp_path / "candidate", tmp_path / "candidate.git", audit_log=tmp_path / "audit.log")
    repo.init()
    spent = Spent(calls=calls, tokens_in=10 * calls)
    return SimpleNamespace(
        state=RunState(run_id="r"),
        config=SimpleNamespace(snapshot_history_cap_mib=cap_mib),
        repo=repo,
        budget=SimpleNamespace(spent=spent),
        save=lambda round: None,
    )


def test_past_the_history_cap_snapshots_stop_once_and_round_ends_go_on(tmp_path):
    from harness.models.budget import Spent
    from harness.run import snapshots

    session = light_session(tmp_path, calls=8, cap_mib=1)
    repo = session.repo
    (repo.work_tree / "weights.bin").write_bytes(os.urandom(2 << 20))  # incompressible: 2 MiB of objects
    first = snapshots.take(session, "calls", round=1, role="migrator")
    assert first is not None and session.state.snapshots_stopped is None  # under the cap when it was taken
    assert snapshots.history_bytes(repo) >= 2 << 20
    for calls in (16, 24):
        session.budget.spent = Spent(calls=calls, tokens_in=10 * calls)
        (repo.work_tree / "a.py").write_text(f"x = {calls}\n")
        assert snapshots.take(session, "calls", round=1) is None
    assert snapshots.take(session, "end", round=1) is None  # the run's end copies too: skipped
    stopped = session.state.snapshots_stopped
    assert (stopped.calls, stopped.taken, stopped.cap_mib) == (16, 1, 1) and stopped.held_bytes >= 2 << 20
    assert stopped.line().startswith("snapshots stopped at 16 model calls: history cap 1 MiB reached (")
    assert (tmp_path / "audit.log").read_text().count("snapshots stopped at") == 1  # recorded once
    assert repo._git("for-each-ref", "--format=%(refname)", "refs/snapshots/").split() == ["refs/snapshots/1"]
    repo.commit_round(1, "round one")
    at_round = snapshots.take(session, "round", round=1)  # a round's end: its tag, no copy
    assert at_round is not None and at_round.ref == "refs/tags/round-1"
    assert [s.kind for s in session.state.snapshots] == ["calls", "round"]
    assert RunState.model_validate_json(session.state.model_dump_json()).snapshots_stopped == stopped


def test_the_history_cap_is_a_run_setting_with_a_default():
    assert RunConfig.build(task="t", model="replay:x").snapshot_history_cap_mib == 4096
    assert RunConfig.build(task="t", model="replay:x", snapshot_history_cap_mib=0.5).snapshot_history_cap_mib == 0.5
    from harness.run.directory import RunError

    with pytest.raises(RunError, match="bad run setting snapshot_history_cap_mib"):
        RunConfig.build(task="t", model="replay:x", snapshot_history_cap_mib=0)


def test_a_snapshot_leaves_the_branch_the_tags_and_the_work_tree_alone(tmp_path):
    from harness.run import snapshots

    session = light_session(tmp_path, calls=8)
    repo = session.repo
    (repo.work_tree / "a.py").write_text("x = 1\n")
    head = repo.head()
    taken = snapshots.take(session, "calls", round=1, role="migrator")
    assert taken is not None and (taken.calls, taken.tokens, taken.ref) == (8, 80, "refs/snapshots/1")
    assert repo.head() == head and repo.rounds() == [0]
    assert repo._git("show", f"{taken.ref}:a.py") == "x = 1"
    assert (repo.work_tree / "a.py").read_text() == "x = 1\n"
    assert snapshots.take(session, "end", round=1) is None  # the same tree and spending: not taken twice
    assert repo._git("for-each-ref", "--format=%(refname)", "refs/snapshots/").split() == ["refs/snapshots/1"]


@pytest.mark.parametrize("name", [".GITMODULES", "gitmod~1", ".gitmodules."])
def test_a_path_git_refuses_is_left_out_of_a_snapshot_not_the_snapshot(tmp_path, name):
    from harness.run import snapshots

    session = light_session(tmp_path, calls=8)
    repo = session.repo
    (repo.work_tree / "a.py").write_text("x = 1\n")
    (repo.work_tree / name).symlink_to("a.py")  # git refuses a .gitmodules that is a link, in any of its forms
    taken = snapshots.take(session, "calls", round=1)
    assert taken is not None and repo._git("show", f"{taken.ref}:a.py") == "x = 1"
    assert name not in repo._git("ls-tree", "--name-only", taken.ref).split()
    assert "snapshot-1" in (tmp_path / "audit.log").read_text()
    assert (repo.work_tree / name).is_symlink()  # the agent's tree is only read


def test_a_snapshot_that_cannot_be_committed_is_audited_and_the_run_goes_on(tmp_path, monkeypatch):
    from harness.run import snapshots
    from harness.run.candidate_repo import CandidateRepoError

    def fail(*args, **kwargs):
        raise CandidateRepoError("git add failed: disk full")

    monkeypatch.setattr(snapshots, "commit_snapshot", fail)
    session = light_session(tmp_path, calls=8)
    assert snapshots.take(session, "calls", round=1) is None
    assert session.state.snapshots == []
    assert "snapshot not taken: git add failed: disk full" in (tmp_path / "audit.log").read_text()


bwrap = pytest.mark.skipif(__import__("shutil").which("bwrap") is None, reason="runs the real bwrap sandbox")


@bwrap
def test_a_run_snapshots_every_k_calls_and_grades_each_tree_once(tmp_path, capsys):
    from harness.cli.app import main
    from harness.run.candidate_repo import CandidateRepo
    from harness.run.migration import run_migration
    from harness.run.session import RunInputs
    from harness.scaffolds.registry import SCAFFOLDS
    from tests.harness import loop_scripts as plans

    model = plans.write_script(tmp_path / "script.json", plans.twin_fix_in_round_two())
    config = RunConfig.build(task=plans.TINY_TASK, model=model, rounds=2, snapshot_every=2, grade_snapshots=True)
    run = RunDir.create(tmp_path / "runs", config, RunState(run_id="run"))
    run_migration(RunInputs.read(run), SCAFFOLDS)
    state = run.load_state()
    # 10 calls: one every 2 (round ends fall on the same calls and trees: not taken twice)
    assert [s.calls for s in state.snapshots] == [2, 4, 6, 8, 10]
    assert [s.round for s in state.snapshots] == [1, 1, 1, 2, 2]
    grades = json.loads(run.grades.read_text())
    assert grades["schema_version"] == 2
    rewards = [(g["reward"], g["same_as"]) for g in grades["snapshots"]]
    # the empty candidate (call 2: only the Diagnoser had answered), round 1's bug, round 2's fix
    assert rewards == [(0.0, ""), (0.5, "round 1"), (0.5, "round 1"), (0.5, "round 1"), (1.0, "round 2")]
    # the round tags and the branch are as a run without snapshots leaves them
    repo = CandidateRepo(run.candidate, run.candidate_git)
    assert repo.rounds() == [0, 1, 2]
    assert repo.head() == state.rounds[1].commit
    assert repo._git("rev-parse", "round-1") == state.rounds[0].commit
    assert repo._git("for-each-ref", "--format=%(refname)", "refs/snapshots/").split() == [
        f"refs/snapshots/{i}" for i in range(1, 6)
    ]
    summary = run.summary.read_text()
    assert "## Reward over what was spent" in summary
    assert "| 5 | calls | 2 | 10 | 1,200 | 0.0000 |" in summary
    from harness.run.finish import closing_lines

    assert "snapshots: 5 graded, best reward 1.0000 (the reward over what was spent: summary.md)" in closing_lines(
        run, run.load_config(), state
    )
    assert main(["evidence", "show", str(run.root)]) == 0
    assert "reward over what was spent" in capsys.readouterr().out


@bwrap
def test_a_run_past_its_history_cap_says_so_and_grades_what_it_took(tmp_path, capsys):
    from harness.cli.app import main
    from harness.run.migration import run_migration
    from harness.run.session import RunInputs
    from harness.scaffolds.registry import SCAFFOLDS
    from tests.harness import loop_scripts as plans

    model = plans.write_script(tmp_path / "script.json", plans.twin_fix_in_round_two())
    config = RunConfig.build(
        task=plans.TINY_TASK, model=model, rounds=2, snapshot_every=2, grade_snapshots=True,
        snapshot_history_cap_mib=1e-6,  # less than the empty candidate's own objects
    )  # fmt: skip
    run = RunDir.create(tmp_path / "runs", config, RunState(run_id="run"))
    run_migration(RunInputs.read(run), SCAFFOLDS)
    state = run.load_state()
    assert [(s.kind, s.round) for s in state.snapshots] == [("round", 1), ("round", 2)]  # round ends only
    line = state.snapshots_stopped.line()
    assert line.startswith("snapshots stopped at 2 model calls: history cap 1e-06 MiB reached (")
    grades = json.loads(run.grades.read_text())
    assert [(g["reward"], g["same_as"]) for g in grades["snapshots"]] == [(0.5, "round 1"), (1.0, "round 2")]
    assert f"- {line}" in run.summary.read_text()
    assert (run.root / "audit.log").read_text().count("snapshots stopped at") == 1
    assert main(["evidence", "show", str(run.root)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "snapshots stopped at 2 model calls: history cap 1e-06 MiB reached" in shown
    assert "reward over what was spent" in shown


@bwrap
def test_resuming_a_finished_run_with_grade_snapshots_grades_them(tmp_path):
    from harness.cli.app import main
    from tests.harness import loop_scripts as plans

    model = plans.write_script(tmp_path / "script.json", plans.base_two_rounds())
    config = RunConfig.build(
        task=plans.TINY_TASK, model=model, scaffold="base", rounds=1, base_steps=3, snapshot_every=1
    )
    run = RunDir.create(tmp_path / "runs", config, RunState(run_id="run"))
    assert main(["migrate", "--resume", str(run.root), "--skip-task-check"]) == 0
    assert json.loads(run.grades.read_text())["snapshots"] == []
    taken = [(s.kind, s.calls) for s in run.load_state().snapshots]
    # at each call, the tree before its tool call ran; at the round's end, after the third call's
    assert taken == [("calls", 1), ("calls", 2), ("calls", 3), ("round", 3)]
    assert main(["migrate", "--resume", str(run.root), "--grade-snapshots"]) == 0
    graded = json.loads(run.grades.read_text())["snapshots"]
    assert [(g["snapshot"]["kind"], g["snapshot"]["calls"]) for g in graded] == taken
    # nothing, one file of two, both files (ops buggy), the round's tree (graded as round 1)
    assert [(g["reward"], g["same_as"]) for g in graded] == [(0.0, ""), (0.0, ""), (0.5, ""), (0.5, "round 1")]
    assert run.load_config().grade_snapshots
