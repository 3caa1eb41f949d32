"""Prompt templates. Only files live here; `harness.prompting` loads and renders them."""
