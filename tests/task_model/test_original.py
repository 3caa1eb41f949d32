"""The declaration of an original: its licence is an SPDX expression, never terminal text."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from task_model.original import OriginalDistribution

VALUES = dict(
    distribution="fakeorig", version="1.0", wheel="fakeorig-1.0-py3-none-any.whl", sha256="a" * 64, files=["fakeorig"]
)  # fmt: skip


@pytest.mark.parametrize("licence", ["Apache-2.0", "MIT OR Apache-2.0", "GPL-2.0-only WITH Classpath-exception-2.0",
                                     "(MIT AND BSD-3-Clause)", "LicenseRef-Proprietary", "NOASSERTION"])  # fmt: skip
def test_an_spdx_expression_is_a_licence(licence):
    assert OriginalDistribution(**VALUES, license=licence).license == licence


@pytest.mark.parametrize(
    "licence", ["MIT\x1b]0;owned\x07", "MIT\r\x1b[2J", "MIT\u202eTIM", "", "MIT  \nBSD", "A" * 201, "MIT; rm -rf /"]
)
def test_anything_else_is_refused_with_its_controls_shown(licence):
    with pytest.raises(ValidationError) as caught:
        OriginalDistribution(**VALUES, license=licence)
    message = str(caught.value)
    assert "SPDX licence expression" in message
    assert not any(c in message for c in "\x1b\x07\r\u202e")
