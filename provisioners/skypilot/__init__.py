"""Any cloud through SkyPilot's client SDK."""
