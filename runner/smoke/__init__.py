"""The smoke stage's probes."""
