"""`twin models`: what model is configured and which provider keys are present."""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import typer
from rich.table import Table

from ground.terminal import agent_console
from harness.models.config import API_BASE_ENV, API_KEY_ENV, MODEL_ENV, parse_model_name

PROVIDER_KEYS: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY",),
    "vertex_ai": ("GOOGLE_APPLICATION_CREDENTIALS",),
    "azure": ("AZURE_API_KEY",),
    "bedrock": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
    "mistral": ("MISTRAL_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "together_ai": ("TOGETHERAI_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "cohere": ("COHERE_API_KEY",),
    "fireworks_ai": ("FIREWORKS_API_KEY",),
    "huggingface": ("HF_TOKEN",),
}
"""Provider (litellm's prefix) → the environment variables litellm reads its key from."""

PROVIDER_BASES: dict[str, str] = {
    "openai": "OPENAI_API_BASE",
    "anthropic": "ANTHROPIC_API_BASE",
    "ollama": "OLLAMA_API_BASE",
    "ollama_chat": "OLLAMA_API_BASE",
    "azure": "AZURE_API_BASE",
}
"""Provider → the environment variable litellm reads a base URL from."""

KEYLESS = {"ollama", "ollama_chat", "replay", "scripted", "inbox", "human"}


def provider_of(model: str) -> str:
    """The provider a model string goes to: litellm's prefix, or a guess for bare names."""
    kind = parse_model_name(model).key
    if kind != "litellm":
        return kind
    if "/" in model:
        return model.split("/", 1)[0]
    lowered = model.lower()
    guesses = (("claude", "anthropic"), ("gemini", "gemini"), ("gpt", "openai"), ("o1", "openai"))
    for stem, provider in guesses:
        if lowered.startswith(stem):
            return provider
    return "unknown (litellm decides)"


def redact_url(url: str) -> str:
    """A URL without any user:password part."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


def _is_set(var: str) -> bool:
    return bool(os.environ.get(var, "").strip())


def models_command(
    model: str | None = typer.Option(
        None, "--model", "-m", help=f"Model string (litellm's); default: ${MODEL_ENV}."
    ),
    api_base: str | None = typer.Option(
        None, "--api-base", help=f"Base URL override; default: ${API_BASE_ENV}."
    ),
) -> None:
    """Show the configured model and which API keys are set (never their values)."""
    name = model or os.environ.get(MODEL_ENV, "").strip() or None
    provider = provider_of(name) if name else None
    base = api_base or os.environ.get(API_BASE_ENV, "").strip() or None
    base_source = "--api-base" if api_base else (API_BASE_ENV if base else None)
    if base is None and provider in PROVIDER_BASES and _is_set(PROVIDER_BASES[provider]):
        base = os.environ[PROVIDER_BASES[provider]]
        base_source = PROVIDER_BASES[provider]

    console = agent_console()
    config = Table(title="Model", show_header=False)
    config.add_column("setting", style="bold")
    config.add_column("value")
    source = "--model" if model else MODEL_ENV
    config.add_row(
        "model", f"{name}  (from {source})" if name else f"none: pass --model or set {MODEL_ENV}"
    )
    config.add_row("provider", provider or "-")
    config.add_row(
        "api base", f"{redact_url(base)}  (from {base_source})" if base else "provider default"
    )
    config.add_row("key", _key_status(provider))
    console.print(config)

    keys = Table(title="Provider keys (values never shown)")
    keys.add_column("variable")
    keys.add_column("provider")
    keys.add_column("status")
    for var, owner in [(API_KEY_ENV, "any (overrides the provider's)")] + [
        (var, prov) for prov, names in PROVIDER_KEYS.items() for var in names
    ]:
        used = " ← used" if var in _key_vars(provider) else ""
        keys.add_row(var, owner, ("set" if _is_set(var) else "not set") + used)
    console.print(keys)


def _key_vars(provider: str | None) -> tuple[str, ...]:
    if provider is None or provider in KEYLESS:
        return ()
    if _is_set(API_KEY_ENV):
        return (API_KEY_ENV,)
    return PROVIDER_KEYS.get(provider, ())


def _key_status(provider: str | None) -> str:
    if provider is None:
        return "-"
    if provider in KEYLESS:
        return "not needed"
    names = _key_vars(provider)
    if not names:
        return f"unknown for this provider; set {API_KEY_ENV} or the provider's variable"
    missing = [var for var in names if not _is_set(var)]
    if missing:
        return f"missing: set {', '.join(missing)} (or {API_KEY_ENV})"
    return f"present in {', '.join(names)}"
