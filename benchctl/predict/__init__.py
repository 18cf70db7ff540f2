"""Prediction before renting: a step time and its parts for a workload on a GPU class (pure: no
provider SDK, no network). ``defaults.json`` holds the published defaults with their sources;
``calibration`` refines them from the store's own measurements."""
