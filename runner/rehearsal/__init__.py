"""The API rehearsal and the capability probe."""
