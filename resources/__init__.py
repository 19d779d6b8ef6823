"""Data-only package: example models (examples/), and later example histories, icons and the stylesheet.

Read files with importlib.resources, e.g.
``importlib.resources.files("resources") / "examples" / "bert_layer_base_train.onnx"``; no code lives here.
"""
