"""Campaign files: YAML, validation, the matrix of cells, the plan."""
