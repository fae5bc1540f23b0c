"""Advantage estimators and losses: GRPO, ORSD."""
