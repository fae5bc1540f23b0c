"""Example text envs: small, engine-free, and written as a user would write their own."""
