"""``ir.onnx_load``: large files are parsed in pieces (no single call holds the GIL for the whole
file), and the pieces make the same message as one parse; a file that cannot be walked falls back
to the whole parse and its usual error."""
from __future__ import annotations

import pytest
from onnx import ModelProto, helper, numpy_helper

import numpy as np

from ir import onnx_load
from ir.errors import ModelImportError
from ir.onnx_load import read_model


def _same(a: ModelProto, b: ModelProto) -> bool:
    return a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


def test_every_fixture_parsed_in_pieces_equals_one_parse(fixtures_dir, monkeypatch):
    monkeypatch.setattr(onnx_load, "PIECES_FROM", 0)
    files = sorted(fixtures_dir.rglob("*.onnx"))
    assert len(files) >= 8
    for path in files:
        blob = path.read_bytes()
        pieces = ModelProto()
        assert onnx_load._parse_in_pieces(blob, pieces), path
        assert _same(pieces, ModelProto.FromString(blob)), path
        assert _same(read_model(path), pieces), path


def test_the_digest_hashed_alongside_the_parse_is_the_files_sha256(fixtures_dir, monkeypatch):
    """The import hashes the bytes it read on a thread while it parses them: the same SHA-256 as hashing the
    file, in chunks of any size (a file over one chunk, and an empty-remainder edge)."""
    files = sorted(fixtures_dir.rglob("*.onnx"))
    big = max(files, key=lambda p: p.stat().st_size)
    for chunk in (1 << 20, 4096, big.stat().st_size):
        monkeypatch.setattr(onnx_load.Digest, "CHUNK", chunk)
        for path in (files[0], big):
            digest = onnx_load.Digest()
            read_model(path, digest=digest)
            assert digest.hexdigest() == onnx_load.file_sha256(path), (path, chunk)
    assert onnx_load.Digest().hexdigest() == "", "nothing read, nothing hashed"


def test_initializer_order_and_every_other_field_survive(tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_load, "PIECES_FROM", 0)
    weights = [numpy_helper.from_array(np.full((3, 3), k, np.float32), f"w{k}") for k in range(5)]
    nodes = [helper.make_node("MatMul", ["x" if k == 0 else f"h{k - 1}", f"w{k}"], [f"h{k}"], name=f"mm{k}")
             for k in range(5)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [3, 3])],
                              [helper.make_tensor_value_info("h4", 1, [3, 3])], weights, doc_string="doc")
    m = helper.make_model(graph, producer_name="test", opset_imports=[helper.make_opsetid("", 17)])
    helper.set_model_props(m, {"k": "v"})
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    got = read_model(path)
    assert [t.name for t in got.graph.initializer] == [f"w{k}" for k in range(5)]
    assert _same(got, m) and got.metadata_props[0].value == "v" and got.graph.doc_string == "doc"


@pytest.mark.parametrize("cut", [0.3, 0.5, 0.9, 0.999])
def test_a_truncated_large_file_still_gets_the_clear_error(fixtures_dir, tmp_path, monkeypatch, cut):
    monkeypatch.setattr(onnx_load, "PIECES_FROM", 0)
    blob = (fixtures_dir / "joint_standard/bert_layer_small_joint_adamw.onnx").read_bytes()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(blob[: int(len(blob) * cut)])
    assert not onnx_load._parse_in_pieces(path.read_bytes(), ModelProto())
    with pytest.raises(ModelImportError) as e:
        read_model(path)
    assert str(path) in str(e.value) and ("not a valid ONNX" in str(e.value) or "truncated" in str(e.value))
