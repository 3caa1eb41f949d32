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


def test_twin_task_fetch_refuses_a_licence_with_terminal_escapes_in_one_plain_line(tmp_path, capsys):
    from harness.cli.app import main

    (tmp_path / "task.toml").write_text(
        'version = "1.0"\n\n[metadata.twin.original]\n'
        + "".join(f'{key} = "{value}"\n' for key, value in VALUES.items() if key != "files")
        + 'files = ["fakeorig"]\nlicense = "MIT\\u001b]0;owned\\u0007\\r\\u001b[2J"\n'
    )
    assert main(["task", "fetch", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert len(captured.err.strip().splitlines()) == 1 and "license" in captured.err
    assert not any(c in captured.err + captured.out for c in "\x1b\x07\r")
    assert "\\x1b" in captured.err
