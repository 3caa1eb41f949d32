"""The evidence a role reads is fenced as data, and the fence never cuts what the renderer kept."""

from __future__ import annotations

from types import SimpleNamespace

from harness.run.loop import TwinLoop
from roles.fence import fence_agent_text


def test_a_large_evidence_budget_is_never_cut_by_the_fence():
    loop = SimpleNamespace(s=SimpleNamespace(config=SimpleNamespace(evidence_chars=50_000)))
    limit = TwinLoop.evidence_limit.fget(loop)
    rendered = "- violated forward.logits (differential, L1)\n" * 1000  # 45,000 characters, whole records
    fenced = fence_agent_text("evidence", rendered, limit=limit)
    assert "(cut:" not in fenced and rendered.strip() in fenced
    assert "(cut:" in fence_agent_text("evidence", rendered)  # the default limit would have cut it
