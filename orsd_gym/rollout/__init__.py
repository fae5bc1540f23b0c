"""Multi-turn rollouts over (vector) envs, producing token-level Trajectories."""
