"""runstate: the Python SDK."""
