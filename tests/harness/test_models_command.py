from __future__ import annotations

import pytest

from harness.cli.app import main
from harness.cli.models import PROVIDER_KEYS, provider_of, redact_url

SECRET = "sk-this-value-must-never-be-printed-42"


@pytest.fixture
def clean_env(monkeypatch):
    for var in ["TWIN_MODEL", "TWIN_API_BASE", "TWIN_API_KEY", "OPENAI_API_BASE"] + [
        var for names in PROVIDER_KEYS.values() for var in names
    ]:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def run(capsys, *args):
    code = main(["models", *args])
    return code, capsys.readouterr().out


def test_without_model_or_keys(clean_env, capsys):
    code, out = run(capsys)
    assert code == 0
    assert "none: pass --model or set TWIN_MODEL" in out
    assert "OPENAI_API_KEY" in out and "ANTHROPIC_API_KEY" in out
    rows = [line for line in out.splitlines() if "_KEY" in line or "HF_TOKEN" in line]
    assert len(rows) >= len(PROVIDER_KEYS)
    assert all("not set" in row for row in rows)


def test_with_keys_never_prints_values(clean_env, capsys):
    clean_env.setenv("ANTHROPIC_API_KEY", SECRET)
    clean_env.setenv("OPENAI_API_KEY", SECRET + "-openai")
    clean_env.setenv("TWIN_MODEL", "anthropic/claude-sonnet-4-5")
    code, out = run(capsys)
    assert code == 0
    assert SECRET not in out and "-must-never-" not in out
    assert "anthropic/claude-sonnet-4-5" in out and "(from TWIN_MODEL)" in out
    assert "present in ANTHROPIC_API_KEY" in out
    anthropic_row = next(
        line
        for line in out.splitlines()
        if "ANTHROPIC_API_KEY" in line and "│" in line and "present" not in line
    )
    assert "set ← used" in anthropic_row


def test_missing_key_for_the_configured_model(clean_env, capsys):
    code, out = run(capsys, "--model", "openai/gpt-4o")
    assert code == 0
    assert "missing: set OPENAI_API_KEY" in out


def test_api_base_and_twin_key(clean_env, capsys):
    clean_env.setenv("TWIN_API_KEY", SECRET)
    code, out = run(
        capsys, "--model", "openai/qwen", "--api-base", "http://user:pw@10.0.0.5:8000/v1"
    )
    assert code == 0
    assert "http://***@10.0.0.5:8000/v1" in out and "pw" not in out
    assert "present in TWIN_API_KEY" in out
    assert SECRET not in out


def test_keyless_providers(clean_env, capsys):
    assert "not needed" in run(capsys, "--model", "ollama/qwen2.5-coder")[1]
    assert "not needed" in run(capsys, "--model", "replay:runs/x/trajectory.jsonl")[1]
    assert "not needed" in run(capsys, "--model", "human")[1]


@pytest.mark.parametrize(
    "model, provider",
    [
        ("anthropic/claude-x", "anthropic"),
        ("openai/gpt-4o", "openai"),
        ("ollama/qwen2.5-coder", "ollama"),
        ("replay:/a/b.jsonl", "replay"),
        ("scripted:s.yaml", "scripted"),
        ("inbox:/tmp/box", "inbox"),
        ("human", "human"),
        ("ollama_chat/qwen2.5-coder:7b", "ollama_chat"),
        ("claude-3-haiku", "anthropic"),
        ("gpt-4o", "openai"),
        ("mystery", "unknown (litellm decides)"),
    ],
)
def test_provider_of(model, provider):
    assert provider_of(model) == provider


def test_redact_url_keeps_plain_urls():
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
