"""The generic LLM-policy interface and its backends."""
