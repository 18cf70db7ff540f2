"""The engine: the cell state machine, attempts on nodes, budget, leases, scheduling."""
