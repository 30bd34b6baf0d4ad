"""Stand-in vLLM for the connector tests (no vLLM can be installed here)."""
