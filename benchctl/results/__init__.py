"""Numbers from events: step times, cost-to-train, rankings, imported results."""
