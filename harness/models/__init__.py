"""The model side of a run: its settings (`ModelConfig`), the litellm client, replayed, scripted, human and
inbox models, the response cache, budgets and the factory that builds a model from its config."""
