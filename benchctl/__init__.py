"""benchctl: benchmark campaigns on rented multi-GPU nodes, ranked by cost-to-train."""

__version__ = "0.1.0"
