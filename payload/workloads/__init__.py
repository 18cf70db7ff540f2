"""The workloads measured on the node: the profile phase (the nanochat model, its ZeRO-2 Muon+AdamW
optimizer, fp8, attention kernels, batches from the host), the presets, memory estimate and
communication volume the controller shares, and the command phase (the user's own script)."""
