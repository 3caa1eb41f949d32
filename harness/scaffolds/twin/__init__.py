"""The twin scaffold: the diagnose–migrate–verify loop and the Verifier's probe desk."""
