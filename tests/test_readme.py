"""The README's first screen: the two set-up commands, what they need, and where the rest is."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_setup_section_fits_on_one_screen_and_links_the_setup_page():
    lines = (REPO / "README.md").read_text().splitlines()
    cli = lines.index("## The CLI at a glance")
    first_screen = "\n".join(lines[:cli])
    assert cli <= 30, f"{cli} lines before 'The CLI at a glance'"
    assert "./scripts/example.sh" in first_screen and "./scripts/test.sh" in first_screen
    assert "`docs/setup.md`" in first_screen
    setup = (REPO / "docs" / "setup.md").read_text()
    for topic in ("bare-machine-check.sh", "-m heavy", "-m slow", "replay"):
        assert topic in setup, topic
