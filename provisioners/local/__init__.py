"""This machine as a provider: nodes of local processes."""
