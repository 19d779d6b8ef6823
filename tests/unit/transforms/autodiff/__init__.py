"""Unit tests for training-graph generation (transforms/autodiff)."""
