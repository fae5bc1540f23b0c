"""Trainer loop, configs, checkpoints, metrics."""
