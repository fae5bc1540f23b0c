"""Experiments built on training runs: comparisons of arms across seeds (`compare`), their
report (`report`), classic-RL baseline arms (`baseline_runs`) and the token-level credit view
of a run's audit (`credit`). Above `orsd_gym.train`, below `orsd_gym.cli`.
"""
