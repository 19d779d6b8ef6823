"""Peer tests: results checked against external oracles (ONNX node suite, onnxruntime, PyTorch)."""
