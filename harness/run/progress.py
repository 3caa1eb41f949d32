"""The live view of a run: round, role, step, tokens, cost and, for a scaffold with evidence, its tally.

On a terminal it is a rich `Live` panel; otherwise (CI, logs, pipes) it prints
one plain line per change of role, never wrapped, so long work still shows progress.
The tally counts properties at their latest outcome (`evidence_store.views.tally`),
as `summary.md`, the prompts and `twin evidence show` do, never records. A scaffold
without evidence (base, mini-swe-agent; `harness.run.figures.shows_evidence`) shows
no evidence counters at all: zeros there would mean nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console
from rich.live import Live
from rich.table import Table

from evidence_store.records import EvidenceRecord
from evidence_store.views import tally, tally_text
from ground.terminal import agent_console
from harness.run.figures import shows_evidence


@dataclass
class RunView:
    """What the view shows."""

    run_id: str
    scaffold: str
    model_label: str
    rounds: int
    round: int = 0
    role: str = "-"
    step: int = 0
    tokens: int = 0
    tokens_estimated: bool = False
    """Some of the tokens were counted by twin (the reply reported none): shown as an estimate."""
    usd: float = 0.0
    latest: dict[str, EvidenceRecord] = field(default_factory=dict)
    """The latest record of every property seen so far."""
    last: str = ""

    @property
    def evidence(self) -> bool:
        """Whether the scaffold keeps evidence: only then are its counters shown."""
        return shows_evidence(self.scaffold)

    @property
    def tokens_label(self) -> str:
        return f"~{self.tokens:,} (estimated)" if self.tokens_estimated else f"{self.tokens:,}"

    @property
    def tally_text(self) -> str:
        return tally_text(tally(self.latest))


class Progress:
    """Receives events from the loop and shows them."""

    def __init__(self, view: RunView, console: Console | None = None, *, live: bool | None = None):
        self.view = view
        self.console = console or agent_console(stderr=True)
        use_live = self.console.is_terminal if live is None else live
        self._live = Live(self._render(), console=self.console, refresh_per_second=4) if use_live else None

    def __enter__(self) -> Progress:
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.stop()

    def role(self, round: int, role: str) -> None:
        self.view.round, self.view.role, self.view.step = round, role, 0
        self._log(f"round {round}/{self.view.rounds} · {role}")

    def step(self, step: int, tokens: int, usd: float, note: str = "", *, estimated: bool = False) -> None:
        self.view.step, self.view.tokens, self.view.usd = step, tokens, usd
        self.view.tokens_estimated = estimated
        if note:
            self.view.last = note
        self._refresh()

    def evidence(self, records: list[EvidenceRecord]) -> None:
        for record in records:
            self.view.latest[record.property.id] = record
        self._refresh()

    def message(self, text: str) -> None:
        self.view.last = text
        self._log(text)

    def _log(self, text: str) -> None:
        if self._live is None:
            tally = f" {self.view.tally_text}" if self.view.evidence else ""
            self.console.print(
                f"{self.view.run_id} {text}  tokens={self.view.tokens_label} ${self.view.usd:.4f}{tally}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
        self._refresh()

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._render())

    def _render(self) -> Table:
        v = self.view
        table = Table(title=f"twin · {v.scaffold} · {v.model_label}", show_header=False)
        table.add_row("run", v.run_id)
        table.add_row("round", f"{v.round}/{v.rounds}")
        table.add_row("role · step", f"{v.role} · {v.step}")
        table.add_row("tokens · cost", f"{v.tokens_label} · ${v.usd:.4f}")
        if v.evidence:
            table.add_row("evidence", v.tally_text if v.latest else "-")
        if v.last:
            table.add_row("last", v.last[:100])
        return table
