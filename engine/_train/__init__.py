"""Training: token-level samples, group advantages, streaming rollouts, export."""
