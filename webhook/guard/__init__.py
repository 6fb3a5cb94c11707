"""The guard: Pod Security Standards for every container but a verified, granted toolset (pure)."""
