"""The model side of a run: the litellm client, replayed, scripted and human models, the response cache, budgets and the factory that builds a model from its name."""
