"""The click CLI: one module per command group. Heavy imports stay inside commands."""
