"""Structured outputs of the roles, validated before the loop accepts them."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Gap(BaseModel):
    """One remaining difference between the original and the candidate."""

    title: str = Field(description="What is missing or wrong, in a few words.")
    evidence: list[str] = Field(
        default_factory=list,
        description="Property ids this gap rests on (or file:line observations: an entry that is no property's "
        "id costs a Verifier's turn).",
    )
    objective: str = Field(description="The repair the Migrator should make, concretely.")
    probes: list[str] = Field(
        default_factory=list,
        description="Property ids that, established, show the gap closed: an existing one, or the id a new "
        "probe should carry (e.g. forward.block.gelu; that is how you ask the Verifier for the probe). Shown to "
        "the Verifier as 'verify with'. Any entry no probe states yet (a new id, words, file:line) costs a "
        "Verifier's turn.",
    )
    sources: list[str] = Field(
        default_factory=list,
        description="Spans of the original the Migrator needs, as path:first-last or path:Name (a definition); "
        "their text goes into the Migrator's task message.",
    )
    priority: int = Field(default=1, ge=1, le=3, description="1 (highest) to 3.")


class Diagnosis(BaseModel):
    """The Diagnoser's output D_t: the gaps left and what to do about them."""

    summary: str = Field(description="State of the candidate in two or three sentences.")
    gaps: list[Gap] = Field(default_factory=list, description="Remaining gaps, most important first.")
    complete: bool = Field(
        default=False,
        description="True: you find nothing left to repair or to check. It ends the run at once (gaps dropped) "
        "only when every property in your evidence is established (what a Verifier could not examine does not "
        "count); otherwise it changes nothing.",
    )

    def render(self) -> str:
        """Markdown for the Migrator's and Verifier's task messages."""
        lines = [self.summary, ""]
        for n, gap in enumerate(self.gaps, 1):
            lines.append(f"{n}. [P{gap.priority}] {gap.title}")
            lines.append(f"   objective: {gap.objective}")
            if gap.evidence:
                lines.append(f"   evidence: {', '.join(gap.evidence)}")
            if gap.probes:
                lines.append(f"   verify with: {'; '.join(gap.probes)}")
            if gap.sources:
                lines.append(f"   sources: {', '.join(gap.sources)}")
        return "\n".join(lines).strip()


class VerifierReport(BaseModel):
    """The Verifier's closing note (its outcomes are in the evidence store, not here)."""

    summary: str = Field(description="What was checked this round, in a few sentences.")
    unchecked: list[str] = Field(
        default_factory=list,
        description="Properties the Verifier could not examine yet, each as 'property: why'.",
    )

    def unchecked_reasons(self) -> list[tuple[str, str]]:
        """Each unchecked entry as (property, why); a bare entry gets 'no reason given'."""
        pairs = []
        for entry in self.unchecked:
            name, _, why = str(entry).partition(":")
            if name.strip():
                pairs.append((" ".join(name.split())[:120], " ".join(why.split()) or "no reason given"))
        return pairs
