"""Gradient-rule tests, one file per rule family: finite differences, onnxruntime, the NumPy executor, torch."""
