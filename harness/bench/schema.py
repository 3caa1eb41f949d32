"""What a bench runs and what it produced: its configuration, trials and results (typed, versioned).

`BenchConfig` is written to `bench.json`, `BenchResults` (every `TrialResult`) to
`results.json`; a trial is one (task, model, scaffold, seed) and one `twin migrate` run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ground.errors import TwinError
from harness.models.budget import Budget
from harness.models.ledger import LedgerLimits
from harness.run.directory import Scaffold

RESULTS_VERSION = 3
"""2: a trial's `curve` (its graded snapshots) and the bench's per-trial `budget` (1 had neither; still read).
3: the bench's `status` and `stop_reason`, and a trial's status `stopped` (2 had none; still read)."""
TrialStatus = Literal["ok", "failed", "infra_failed", "not_started", "stopped"]
BenchStatus = Literal["running", "finished", "interrupted"]


class BenchError(TwinError):
    """A bench that cannot be run as asked."""


class BenchConfig(BaseModel):
    """What a bench runs; written to `bench.json`."""

    schema_version: int = Field(default=RESULTS_VERSION)
    name: str = Field(description="Bench directory name under the benches root.")
    tasks: list[Path] = Field(description="Task directories.")
    models: list[str] = Field(
        description="Model strings; '{task}', '{scaffold}' and '{seed}' are filled in per trial "
        "(e.g. replay:examples/{task}/{scaffold}.jsonl)."
    )
    scaffolds: list[Scaffold] = Field(default_factory=lambda: ["twin", "base"])
    rounds: int = Field(default=2, ge=1, description="Rounds of every trial.")
    seeds: int = Field(default=1, ge=1, description="Seeds per configuration.")
    jobs: int = Field(default=1, ge=1, description="Trials run at once (local executor).")
    executor: Literal["local", "ray"] = Field(default="local")
    ray_address: str | None = Field(default=None, description="Ray cluster address (None: local Ray).")
    limits: LedgerLimits = Field(default_factory=LedgerLimits, description="Budget of the whole bench.")
    budget: Budget = Field(
        default_factory=Budget,
        description="Every trial's own budget, the same numbers for every scaffold (tokens, dollars, calls, wall).",
    )
    snapshot_every: int = Field(default=8, ge=0, description="Every trial snapshots its candidate every N calls.")
    grade_snapshots: bool = Field(default=True, description="Grade every trial's snapshots: its reward curve.")
    sandbox: str = Field(default="auto", description="Sandbox of every trial.")
    api_base: str | None = Field(default=None, description="Base URL for every trial's model.")
    model_retries: int | None = Field(default=None, ge=0, description="Retries of one model call.")
    infra_retries: int = Field(default=2, ge=0, description="Retries of an infrastructure failure.")
    retry_backoff_s: float = Field(default=30.0, ge=0, description="First retry delay (doubles).")


class TrialSpec(BaseModel):
    """One trial."""

    task: Path
    model: str
    scaffold: Scaffold
    seed: int

    @property
    def task_name(self) -> str:
        """The task directory's name, or a settings file's stem (`--tasks my-port.toml`)."""
        return self.task.stem if self.task.suffix == ".toml" and self.task.is_file() else self.task.name

    @property
    def model_name(self) -> str:
        return self.model.format(task=self.task_name, scaffold=self.scaffold, seed=self.seed)

    @property
    def trial_id(self) -> str:
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", self.model).strip("-")[:60]
        return f"{self.task_name}__{slug}__{self.scaffold}__s{self.seed}"


class CurvePoint(BaseModel):
    """One graded snapshot of a trial: what it had spent, and the reward of its candidate then."""

    calls: int
    tokens: int
    usd: float
    wall_s: float
    reward: float


class TrialResult(BaseModel):
    """What one trial produced."""

    trial_id: str
    task: str
    model: str = Field(description="The model string as configured (with placeholders).")
    model_label: str = Field(default="", description="e.g. 'replayed from …' for a replay.")
    scaffold: Scaffold
    seed: int
    status: TrialStatus = Field(
        description="'stopped': stopped with its bench (Ctrl-C, SIGTERM, SIGHUP); no result, the next bench resumes it."
    )
    rewards: dict[int, float | None] = Field(
        default_factory=dict,
        description="Reward of the candidate the scaffold would have delivered with a budget of "
        "r rounds, for r = 1..R (the ablation).",
    )
    snapshot_rewards: dict[int, float | None] = Field(
        default_factory=dict, description="Reward of each round's snapshot."
    )
    final_round: int | None = None
    cost_usd: float = 0.0
    tokens: int = 0
    tokens_in: int = Field(default=0, description="Prompt tokens (the cached part included).")
    tokens_cached: int = Field(default=0, description="Prompt tokens read from the provider's prompt cache.")
    tokens_estimated: int = Field(default=0, description="Tokens twin estimated because replies reported none.")
    calls: int = 0
    wall_s: float = 0.0
    stop_reason: str = ""
    trial_wall_s: float = Field(default=0.0, description="Launch to collected result, this attempt.")
    attempts: int = 0
    error: str = ""
    curve: list[CurvePoint] = Field(
        default_factory=list,
        description="The trial's graded snapshots by spending: its reward as a step curve (ungraded ones left out).",
    )
    failures: list[dict] = Field(
        default_factory=list,
        description="Violated properties of the final candidate by the same post-run checks "
        "for every scaffold: {id, kind, level}.",
    )

    @property
    def reward(self) -> float | None:
        return self.rewards.get(max(self.rewards)) if self.rewards else None


class BenchResults(BaseModel):
    """`results.json`."""

    schema_version: int = Field(default=RESULTS_VERSION)
    config: BenchConfig
    status: BenchStatus = Field(
        default="running",
        description="'interrupted': stopped by Ctrl-C, SIGTERM or SIGHUP; the same `twin bench` command resumes it.",
    )
    stop_reason: str = Field(default="", description="How an interrupted bench was stopped, e.g. 'stopped by SIGTERM'.")
    trials: dict[str, TrialResult] = Field(default_factory=dict)
    overhead_s: dict[str, float] = Field(
        default_factory=dict,
        description="Per trial: time outside its `twin migrate` process (bookkeeping, post-run checks).",
    )


def trials_of(config: BenchConfig) -> list[TrialSpec]:
    return [
        TrialSpec(task=task, model=model, scaffold=scaffold, seed=seed)
        for task in config.tasks
        for model in config.models
        for scaffold in config.scaffolds
        for seed in range(config.seeds)
    ]
