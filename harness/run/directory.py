"""Run configuration, run state and the run directory (DESIGN.md, "Run directory").

`runs/<run-id>/` holds `config.json` (the whole configuration), `state.json` (which
steps are complete, for resume), `trajectory.jsonl`, `evidence.sqlite`, `audit.log`,
`candidate/` (+ `candidate.git`), `probes/` (the Verifier's probe files),
`workspace/` (source and assets copies), `grades.json` and `summary.md`.
"""

from __future__ import annotations

import json
import secrets
import time
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from ground.errors import TwinError
from ground.untrusted_io import write_text_atomic
from harness.models.budget import Budget, Spent
from harness.models.budget_plan import BudgetShares, RoundPlan
from harness.models.config import ModelConfig, nest_model_settings
from harness.run.final_choice import FinalRule, choice
from harness.run.snapshots import Snapshot, SnapshotsStopped

STATE_VERSION = 2
"""2: a round's `model_calls` and `tokens` are its own; the running totals are `model_calls_total` and
`tokens_total` (1 had only `model_calls`, a running total; still read)."""
CONFIG_VERSION = 2
"""2: the model's settings in one `model` table (1 kept them flat beside the run's; still read)."""
MAX_ROUNDS = 20
"""The most rounds a run may have."""
Scaffold = Literal["twin", "base", "mini-swe-agent"]
"""Scaffold names; `harness.scaffolds.registry.SCAFFOLDS` maps each to its implementation."""
Step = Literal["diagnose", "migrate", "verify"]
STEPS: tuple[Step, ...] = ("diagnose", "migrate", "verify")


class RunError(TwinError):
    """A run directory or configuration that cannot be used."""


class RunConfig(BaseModel):
    """Everything that defines a run; written whole to `config.json`."""

    schema_version: int = Field(default=CONFIG_VERSION, description="config.json format version.")
    task: Path = Field(description="The task directory (Harbor format).")
    model: ModelConfig = Field(description="The model: its name and settings (a bare name is accepted too).")
    scaffold: Scaffold = Field(
        default="twin", description="'twin' (the loop), 'base' (one agent) or 'mini-swe-agent' (its default agent)."
    )
    rounds: int = Field(default=2, ge=1, le=MAX_ROUNDS, description="Refinement rounds R.")
    seed: int = Field(default=0, description="Trial seed (recorded; passed to probes).")
    budget: Budget = Field(default_factory=Budget, description="Token, dollar, call and time limits.")
    budget_shares: BudgetShares = Field(
        default_factory=BudgetShares,
        description="How each twin round splits what is left of the budget between the roles ([run.budget_shares]).",
    )
    diagnoser_steps: int = Field(default=30, ge=1, description="Model calls per Diagnoser run.")
    migrator_steps: int = Field(default=80, ge=1, description="Model calls per Migrator run.")
    verifier_steps: int = Field(default=40, ge=1, description="Model calls per Verifier run.")
    base_steps: int = Field(default=150, ge=1, description="Model calls per base-scaffold round.")
    sandbox: str = Field(default="auto", description="Sandbox kind: auto, bwrap, docker or none.")
    command_timeout_s: float = Field(default=600.0, gt=0, description="Limit of one agent command.")
    evidence_chars: int = Field(default=6000, ge=500, description="Evidence budget in prompts.")
    handoff_chars: int = Field(
        default=12000,
        ge=0,
        description="Characters of the original's text, cited by the diagnosis, put into the Migrator's task message.",
    )
    context_whole_outputs: int = Field(
        default=8,
        ge=1,
        description="Each model call of a role (or the base agent) carries its last N to 2N-1 tool outputs whole.",
    )
    context_old_output_chars: int = Field(
        default=2000, ge=200, description="An older tool output is sent cut to this many characters, with a marker."
    )
    context_max_chars: int = Field(
        default=400_000,
        ge=10_000,
        description="Past this many characters a conversation's older tool outputs are sent as one-line summaries.",
    )
    grade: bool = Field(default=True, description="Grade every round's snapshot after the run.")
    snapshot_every: int = Field(
        default=8,
        ge=0,
        description="Commit the candidate as a snapshot every N model calls (and at each round's end), with "
        "what was spent so far; 0: at round ends only.",
    )
    snapshot_history_cap_mib: float = Field(
        default=4096,
        gt=0,
        description="Once the candidate's git objects (rounds and snapshots) hold this many MiB, no more snapshots "
        "every N calls nor at the run's end (a round's end still: it copies nothing). 4 GiB: four snapshots at the "
        "copy's 1 GiB cap, far above any ordinary candidate's whole history.",
    )
    grade_snapshots: bool = Field(
        default=False, description="Grade every snapshot after the run (reward as a curve over what was spent)."
    )
    final_rule: FinalRule = Field(
        default="best-evidence",
        description="How the final round is chosen: 'best-evidence' (best evidence score among verified rounds, "
        "ties to the latest) or 'last-complete' (the latest round whose every step completed).",
    )

    @model_validator(mode="before")
    @classmethod
    def _model_in_one_table(cls, data: object) -> object:
        """Version 1's flat model settings (`model` a name, `model_retries`, … beside the run's) nested,
        whether they come from an old `config.json`, a `[run]` table or keywords."""
        if not isinstance(data, dict):
            return data
        return {**nest_model_settings(data), "schema_version": CONFIG_VERSION}

    @classmethod
    def from_toml(cls, path: Path, **overrides: object) -> RunConfig:
        """Read `[run]` of a TOML file (or its top level), then apply non-None overrides (the model's
        settings one by one, into its table)."""
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise RunError(f"cannot read config {path}: {exc}") from None
        data = nest_model_settings(data.get("run", data))
        overrides = nest_model_settings({k: v for k, v in overrides.items() if v is not None})
        model = {**_as_table(data.get("model")), **_as_table(overrides.pop("model", None))}
        return cls.build(**{**data, **overrides, **({"model": model} if model else {})})

    @classmethod
    def build(cls, **fields: object) -> RunConfig:
        """A config from keywords (the model's settings as a table, or flat as in version 1).

        Raises:
            RunError: the first invalid setting, named (`model.retries`).
        """
        try:
            return cls(**fields)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise RunError(f"bad run setting {where}: {first['msg']}") from None

    def with_model_wait(self, wait_s: float) -> RunConfig:
        """This config waiting `wait_s` for each inbox reply (`--model-wait-s` on resume).

        Raises:
            RunError: `wait_s` is not a positive number.
        """
        try:
            model = self.model.with_wait(wait_s)
        except ValidationError as exc:
            raise RunError(f"bad run setting model.wait_s: {exc.errors()[0]['msg']}") from None
        return self.model_copy(update={"model": model})


def _as_table(model: object) -> dict:
    """A model's settings as a table: `None` is none, a `ModelConfig` its fields."""
    if isinstance(model, ModelConfig):
        return model.model_dump(exclude_unset=True)
    return dict(model) if isinstance(model, dict) else {}


class RoundState(BaseModel):
    """Progress of one round."""

    round: int
    done: list[Step] = Field(default_factory=list, description="Steps completed, in order.")
    commit: str | None = Field(default=None, description="Candidate commit after the Migrator.")
    model_calls: int = Field(default=0, description="Model calls this round made (its own, not a running total).")
    tokens: int = Field(default=0, description="Tokens (prompt and completion) this round's model calls used.")
    model_calls_total: int = Field(
        default=0, description="Running total: the run's model calls when this round's last step was saved."
    )
    tokens_total: int = Field(default=0, description="Running total: the run's tokens at the same moment.")
    note: str = Field(default="", description="E.g. 'diagnosis invalid: derived from evidence'.")
    agent_submitted: bool | None = Field(
        default=None, description="A single-agent scaffold's round: whether its agent submitted (None: twin's)."
    )
    evidence_score: int | None = Field(
        default=None, description="Established minus violated properties after verification."
    )
    budget_plan: RoundPlan | None = Field(
        default=None, description="What was left of the budget at the round's start and each role's share of it."
    )


class RunState(BaseModel):
    """What is complete; rewritten atomically after every step."""

    schema_version: int = Field(default=STATE_VERSION)
    run_id: str
    status: Literal["running", "finished", "stopped", "failed"] = "running"
    stop_reason: str = ""
    rounds: list[RoundState] = Field(default_factory=list)
    final_round: int | None = Field(default=None, description="Round chosen as the final candidate.")
    final_choice: str = Field(default="", description="Why that round was chosen.")
    spent: Spent = Field(default_factory=Spent, description="Budget spent so far (resume continues).")
    started: float = Field(default_factory=time.time)
    grading_s: float | None = Field(
        default=None, description="Seconds grading took after the rounds (not in `spent.wall_s`); None: not graded."
    )
    audit_offset: int = Field(default=0, description="Bytes of audit.log already turned into evidence.")
    snapshots: list[Snapshot] = Field(
        default_factory=list, description="The candidate's snapshots while the run worked (`harness.run.snapshots`)."
    )
    snapshots_stopped: SnapshotsStopped | None = Field(
        default=None,
        description="Set once, when the history's cap stopped snapshots every N calls; None: it never did.",
    )

    @model_validator(mode="before")
    @classmethod
    def _own_calls_per_round(cls, data: object) -> object:
        """Version 1's `rounds[].model_calls` was a running total: it becomes `model_calls_total`, and each
        round's own calls the difference from the round before."""
        if not isinstance(data, dict) or data.get("schema_version", STATE_VERSION) >= 2:
            return data
        rounds, before = [], 0
        for entry in sorted((dict(r) for r in data.get("rounds") or []), key=lambda r: r.get("round", 0)):
            total = int(entry.get("model_calls", 0))
            entry.update(model_calls_total=total, model_calls=max(0, total - before))
            before = max(before, total)
            rounds.append(entry)
        return {**data, "rounds": rounds, "schema_version": STATE_VERSION}

    def account(self, round: int) -> None:
        """Charge `round` with what the run spent since the round before it ended (from `spent`).

        Called whenever the state is saved during a round, so a round's own model calls and
        tokens, and the running totals beside them, are those of its last save. A round not
        begun is left alone.
        """
        rs = next((r for r in self.rounds if r.round == round), None)
        if rs is None:
            return
        earlier = [r for r in self.rounds if r.round < round]
        calls_before = max((r.model_calls_total for r in earlier), default=0)
        tokens_before = max((r.tokens_total for r in earlier), default=0)
        rs.model_calls_total, rs.tokens_total = self.spent.calls, self.spent.tokens
        rs.model_calls = max(0, self.spent.calls - calls_before)
        rs.tokens = max(0, self.spent.tokens - tokens_before)

    def round_state(self, round: int) -> RoundState:
        for state in self.rounds:
            if state.round == round:
                return state
        state = RoundState(round=round)
        self.rounds.append(state)
        return state

    def choice_with_rounds(self, rounds: int, rule: FinalRule = "best-evidence") -> int | None:
        """The candidate a run limited to `rounds` rounds would deliver under `rule` (`final_choice`).

        Used for the final choice and for the round ablation of a bench (one R-round run
        gives the 1..R-round results).
        """
        return choice(self, rounds, rule)

    @property
    def model_calls_total(self) -> int:
        """The running total of model calls when the last completed step was saved."""
        return max((r.model_calls_total for r in self.rounds if r.done), default=0)


def new_run_id() -> str:
    """A run id that sorts by start time: `20250101-120000-a1b2c3`."""
    return time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


class RunDir:
    """Paths of one run directory and the reading and writing of its config and state."""

    def __init__(self, root: Path) -> None:
        self.root = root

    config_path = property(lambda self: self.root / "config.json")
    state_path = property(lambda self: self.root / "state.json")
    trajectory = property(lambda self: self.root / "trajectory.jsonl")
    evidence = property(lambda self: self.root / "evidence.sqlite")
    audit_log = property(lambda self: self.root / "audit.log")
    candidate = property(lambda self: self.root / "candidate")
    candidate_git = property(lambda self: self.root / "candidate.git")
    probes = property(lambda self: self.root / "probes")
    workspace = property(lambda self: self.root / "workspace")
    grades = property(lambda self: self.root / "grades.json")
    summary = property(lambda self: self.root / "summary.md")

    @classmethod
    def create(cls, runs_dir: Path, config: RunConfig, state: RunState) -> RunDir:
        """Make a new run directory named after `state.run_id` and write its config and initial state."""
        root = runs_dir / state.run_id
        if root.exists():
            raise RunError(f"run directory already exists: {root} (use --resume to continue it)")
        root.mkdir(parents=True)
        run = cls(root)
        run.write_config(config)
        run.save_state(state)
        return run

    @classmethod
    def open(cls, run: str | Path, runs_dir: Path = Path("runs")) -> RunDir:
        """Open an existing run by path or by id under `runs_dir`."""
        root = Path(run)
        if not (root / "config.json").is_file():
            root = runs_dir / str(run)
        if not (root / "config.json").is_file():
            raise RunError(f"no run at {run}: expected a run directory with config.json")
        return cls(root)

    def load_config(self) -> RunConfig:
        try:
            data = json.loads(self.config_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise RunError(f"cannot read {self.config_path}: {exc}") from None
        if data.get("schema_version", 0) > CONFIG_VERSION:
            raise RunError(f"{self.config_path} was written by a newer twin; upgrade twin to resume it")
        return RunConfig.build(**data)

    def write_config(self, config: RunConfig) -> None:
        write_text_atomic(self.config_path, config.model_dump_json(indent=2))

    def load_state(self) -> RunState:
        try:
            state = RunState.model_validate_json(self.state_path.read_text())
        except (OSError, ValidationError) as exc:
            raise RunError(f"cannot read {self.state_path}: {str(exc).splitlines()[0]}") from None
        if state.schema_version > STATE_VERSION:
            raise RunError(f"{self.state_path} was written by a newer twin")
        return state

    def save_state(self, state: RunState) -> None:
        write_text_atomic(self.state_path, state.model_dump_json(indent=2))
