"""The node itself: its facts (captured and parsed), GPU models, the preflight thresholds and checks,
the live probes, and the preflight phase that judges whether the node is fit to measure on."""
