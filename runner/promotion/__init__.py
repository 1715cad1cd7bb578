"""The promotion gate."""
