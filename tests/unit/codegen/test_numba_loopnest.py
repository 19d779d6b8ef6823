"""Maps become numba loop nests (``codegen/numba_cpu/loopnest.py``): same results as the reference
executor, canonical shareable kernel text, hoisting, output initialisation, parallel safety, refusals."""
from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from codegen.numba_cpu.exprs import NumbaExpr  # noqa: E402
from codegen.numba_cpu.render import UnsupportedMap, kernel_source  # noqa: E402
from codegen.numba_cpu.runner import CompiledGraph  # noqa: E402
from codegen.numpy_ref.executor import run as reference  # noqa: E402
from codegen.numpy_ref.feeds import compare, feeds_for  # noqa: E402
from codegen.program.expr_print import UnsupportedExpr  # noqa: E402
from codegen.program.kernel import kernel_name  # noqa: E402
from ir import expr as E  # noqa: E402
from ir import lowering  # noqa: E402
from ir.containers import Container, Role  # noqa: E402
from ir.graph import Graph  # noqa: E402
from ir.maps import finalize  # noqa: E402
from ir.memlet import Memlet, Range  # noqa: E402
from ir.nodes import MapNode, Tasklet  # noqa: E402
from ir.onnx_import import import_proto  # noqa: E402
from tests.unit.ir.onnx_models import model, vi  # noqa: E402


def _same_as_reference(g: Graph, rtol: float = 2e-6, feeds=None) -> CompiledGraph:
    feeds = feeds or feeds_for(g)
    cg = CompiledGraph(g, threads=1)
    assert not cg.extern_nodes(), cg.extern_nodes()
    assert compare(reference(g, feeds), cg.run(feeds), rtol) == []
    return cg


def _ops_graph():
    """Broadcasting arithmetic, activations with transcendentals, reductions and norms."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("b", (16,)), ("gamma", (16,)), ("beta", (16,)))]
    nodes = [helper.make_node("Add", ["x", "b"], ["h"]),
             helper.make_node("Gelu", ["h"], ["g"], domain="com.microsoft"),
             helper.make_node("Tanh", ["g"], ["t"]),
             helper.make_node("Softmax", ["t"], ["s"], axis=-1),
             helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["ln"], axis=-1),
             helper.make_node("ReduceSum", ["ln", "axes"], ["r"], keepdims=0),
             helper.make_node("ReduceMax", ["x"], ["mx"], axes=[0, 2], keepdims=1),
             helper.make_node("Exp", ["x"], ["e"]),
             helper.make_node("Div", ["e", "mx"], ["d"]),
             helper.make_node("Sqrt", ["e"], ["q"]),
             helper.make_node("Pow", ["d", "two"], ["p"])]
    inits += [numpy_helper.from_array(np.array([0, 1], np.int64), "axes"),
              numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    m = model(nodes, [vi("x", [4, 8, 16])], [vi("r", [16]), vi("p", [4, 8, 16]), vi("q", [4, 8, 16])], inits)
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return import_proto(m)


def test_elementwise_reductions_and_norms_match_reference():
    cg = _same_as_reference(_ops_graph(), rtol=5e-6)
    assert cg.kernel_count()["kernel"] == 11


def test_integer_logic_cast_and_where_match_reference():
    nodes = [helper.make_node("Equal", ["i", "j"], ["eq"]),
             helper.make_node("Not", ["eq"], ["ne"]),
             helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
             helper.make_node("Where", ["ne", "fi", "x"], ["w"]),
             helper.make_node("Div", ["i", "j"], ["q"]),
             helper.make_node("Mod", ["i", "j"], ["r"])]
    g = import_proto(model(nodes, [vi("i", [3, 5], TensorProto.INT64), vi("j", [3, 5], TensorProto.INT64),
                                   vi("x", [3, 5])],
                           [vi("w", [3, 5]), vi("q", [3, 5], TensorProto.INT64), vi("r", [3, 5], TensorProto.INT64)]))
    feeds = {"i": np.array([[-7, -6, 0, 5, 9]] * 3, np.int64), "j": np.array([[2, -4, 3, 3, -2]] * 3, np.int64),
             "x": np.ones((3, 5), np.float32)}
    _same_as_reference(g, 0.0, feeds)


def _adamw_graph(n: int = 64):
    nodes = [helper.make_node("AdamW", ["lr", "step", "p", "g", "m", "v"], ["p.new", "m.new", "v.new"],
                              domain="ai.dcstudio", weight_decay=0.01, adam_mode=1, name="opt")]
    shapes = {"lr": [], "step": [], "p": [n], "g": [n], "m": [n], "v": [n]}
    ins = [vi(k, s, TensorProto.INT64 if k == "step" else TensorProto.FLOAT) for k, s in shapes.items()]
    m = model(nodes, ins, [vi(k, [n]) for k in ("p.new", "m.new", "v.new")])
    m.opset_import.append(helper.make_opsetid("ai.dcstudio", 1))
    g = import_proto(m)
    lowering.expand_all(g)
    return g


def test_adamw_hoists_the_bias_corrections_out_of_the_loop():
    g = _adamw_graph()
    ks = kernel_source(g.nodes["opt/expanded"], g)
    body = ks.source.split("for p0")[0]
    assert "h0 = " in body and "**" in body      # step-dependent powers computed once, before the loop
    loop = ks.source.split("for p0")[1]
    assert "**" not in loop
    feeds = feeds_for(g)
    feeds["step"] = np.array(3, np.int64)
    feeds["v"] = np.abs(feeds["v"])
    _same_as_reference(g, 1e-6, feeds)


def test_kernel_text_is_canonical_and_names_nothing_from_the_model():
    def chain(name: str, n: int):
        g = import_proto(model([helper.make_node("Relu", [f"in_{name}"], [f"out_{name}"], name=name)],
                               [vi(f"in_{name}", [n, 3])], [vi(f"out_{name}", [n, 3])]))
        lowering.expand_all(g)
        return kernel_source(g.nodes[f"{name}/expanded"], g)
    a, b = chain("alpha", 5), chain("secret_token", 17)
    assert a.name == b.name and a.source == b.source       # one compiled function serves both
    assert a.extents == (5, 3) and b.extents == (17, 3)
    assert "secret" not in b.source and "alpha" not in a.source
    assert a.name.startswith("k_relu_") and "secret" not in b.name


@pytest.mark.parametrize("label, slug", [
    ("Add+Add>LayerNormalization", "add_layernorm"),
    ("LayerNormalizationGrad>ReduceSum", "layernorm_grad_reduce_sum"),
    ("Mul+Mul+Mul+Add+Sqrt+Add+Mul+Mul+Add+Div+Mul+Sub", "mul_add_sqrt"),
    ("SoftmaxGrad_13>Mul", "softmax_grad_mul"),
    ("FusedMatMul+Gelu", "matmul_gelu"),
    ("fused:/layer/0/attn (x); import os", "map"),
    ("Ünïcode+Relu", "relu"),
    ("", "map"),
])
def test_kernel_names_say_what_they_fuse_and_keep_the_hash(label, slug):
    """The name is ``k_<ops>_<sha of the text>``: only ASCII op identifiers of the label reach it."""
    name = kernel_name(label, "text")
    assert name == f"k_{slug}_{hashlib.sha256(b'text').hexdigest()[:16]}"
    assert name.isidentifier() and name.isascii()
    assert kernel_name(label, "other text") != name


def _map_graph(body_out: Memlet, body_in: dict[str, Memlet], expr, n: int = 8, dtype: str = "float32",
               attach: bool = True) -> tuple[Graph, MapNode]:
    g = Graph("g")
    g.add_container(Container("x", (n,), dtype, Role.INPUT))
    g.add_container(Container("y", (n,), dtype, Role.OUTPUT))
    g.inputs, g.outputs = ["x"], ["y"]
    m = MapNode("m", [("i", Range.of(0, n - 1))], [Tasklet("t", expr, body_in, body_out)])
    finalize(m, g)
    if attach:
        g.add_node(m)
    return g, m


def test_map_reading_what_it_writes_elsewhere_is_refused():
    """(Not a valid graph — it would be a cycle — but the printer must never reorder such a body.)"""
    i = E.Var("i")
    nxt = E.Bin("add", i, E.Const(1, "int64"))
    g, m = _map_graph(Memlet("y", (i,)), {"a": Memlet("y", (nxt,)), "b": Memlet("x", (i,))},
                      E.Bin("add", E.Var("a"), E.Var("b")), attach=False)
    with pytest.raises(UnsupportedMap, match="reads 'y'"):
        kernel_source(m, g)


def test_map_the_backend_cannot_type_runs_in_the_reference_executor():
    i = E.Var("i")
    g, m = _map_graph(Memlet("y", (i,)), {"a": Memlet("x", (i,))}, E.Bin("mul", E.Var("a"), E.Var("a")),
                      dtype="bfloat16")
    cg = CompiledGraph(g, threads=1)
    assert [n for n, _ in cg.extern_nodes()] == ["m"] and "bfloat16" in cg.extern_nodes()[0][1]
    feeds = {"x": np.arange(8).astype(_bf16())}
    np.testing.assert_array_equal(cg.run(feeds)["y"], reference(g, feeds)["y"])


def test_operands_without_a_common_dtype_are_refused_by_name():
    printer = NumbaExpr({"a": "bfloat16", "b": "int64"}, {"a": "a", "b": "b"})
    assert printer.emit(E.Bin("max", E.Var("a"), E.Var("a"))) == "dcs_max(a, a)" and printer.helpers == {"dcs_max"}
    with pytest.raises(UnsupportedExpr, match="no common dtype of bfloat16 and int64; cast one operand first"):
        printer.emit(E.Bin("max", E.Var("a"), E.Var("b")))


def _bf16():
    from ir.dtypes import to_numpy
    return to_numpy("bfloat16")


def test_output_initialisation_follows_the_writes():
    g = _ops_graph()
    lowering.expand_all(g)
    inits = {c: ks.init[c].kind for n in g.nodes.values() if isinstance(n, MapNode)
             for ks in [kernel_source(n, g)] for c in ks.outputs}
    assert inits["h"] == "empty"          # one plain write covers every element
    assert inits["mx"] == "full"          # ReduceMax accumulates into the output (wcr=max)


def test_a_unit_dimension_written_at_index_zero_is_not_zeroed_first():
    """LayerNormalization's saved mean and inverse std (keepdims: a unit last axis) are written whole by
    the kernel at index 0 of that axis: the caller allocates them empty, and the values still match."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), n) for n in ("gamma", "beta")]
    node = helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["ln", "mean", "inv"], axis=-1)
    g = import_proto(model([node], [vi("x", [4, 8, 16])], [vi("ln", [4, 8, 16]), vi("mean", [4, 8, 1]),
                                                           vi("inv", [4, 8, 1])], inits))
    lowering.expand_all(g)
    inits = {c: ks.init[c].kind for n in g.nodes.values() if isinstance(n, MapNode)
             for ks in [kernel_source(n, g)] for c in ks.outputs}
    assert inits["mean"] == inits["inv"] == "empty"
    _same_as_reference(g)


def test_parallel_only_when_the_outer_loop_owns_its_writes():
    g = import_proto(model([helper.make_node("Relu", ["x"], ["y"], name="relu"),
                            helper.make_node("ReduceSum", ["x", "axes"], ["s"], name="colsum", keepdims=0),
                            helper.make_node("Transpose", ["x"], ["xt"], name="tr", perm=[1, 0])],
                           [vi("x", [512, 256])], [vi("y", [512, 256]), vi("s", [256]), vi("xt", [256, 512])],
                           [numpy_helper.from_array(np.array([0], np.int64), "axes")]))
    lowering.expand_all(g)
    relu = kernel_source(g.nodes["relu/expanded"], g, parallel=True)
    assert relu.parallel and "prange" in relu.source and "parallel=True" in relu.source
    assert not kernel_source(g.nodes["relu/expanded"], g, parallel=False).parallel
    cg = CompiledGraph(g, threads=2, parallel=True)
    feeds = feeds_for(g)
    assert compare(reference(g, feeds), cg.run(feeds), 1e-5) == []




def _gelu_column_sum(shape, extra_nodes, extra_outputs):
    """GELU of x and its sum over rows (``s``), beside ``extra_nodes``, expanded into maps; the first
    reduction_fusion match applied. Returns the graph and whether one applied."""
    from transforms.registry import create
    m = model(extra_nodes + [helper.make_node("Gelu", ["x"], ["gx"], name="gelu", domain="com.microsoft"),
                             helper.make_node("ReduceSum", ["gx", "axes"], ["s"], name="colsum", keepdims=0)],
              [vi("x", shape)], extra_outputs + [vi("s", [shape[1]])],
              [numpy_helper.from_array(np.array([0], np.int64), "axes")])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    g = import_proto(m)
    lowering.expand_all(g)
    rf = create("reduction_fusion")
    fused = [x for x in rf.matches(g) if rf.check(g, x).ok]
    if fused:
        rf.rewrite(g, fused[0], 1)
    return g, bool(fused)


def test_schedules_follow_memory_order():
    """A transpose runs in tiles; a reduction over rows of a map over columns runs rows-outside with
    one accumulator per column (contiguous innermost loop); both stay exact."""
    from codegen.numba_cpu import schedules
    g, _ = _gelu_column_sum([300, 70], [helper.make_node("Transpose", ["x"], ["xt"], name="tr", perm=[1, 0])],
                            [vi("xt", [70, 300])])
    kinds = {n.id: schedules.choose(n) for n in g.nodes.values() if isinstance(n, MapNode)}
    assert kinds["tr/expanded"] == "tiled"
    assert "columns" in kinds.values() or kinds.get("colsum/expanded") == "columns"
    ks = kernel_source(g.nodes["tr/expanded"], g)
    assert "ba = ia * " in ks.source and ks.schedule == "tiled 32x256 (a transpose)"
    _same_as_reference(g, 1e-5)


@pytest.mark.parametrize("columns", [300, 16400], ids=["whole-row", "blocks"])
def test_column_reductions_run_whole_rows_or_blocks(columns):
    """A reduction over rows fused with its elementwise producer: up to WHOLE_ROW columns the
    column loop is one block from 0 (vectorizes and streams; 4x faster on the BERT GELU
    gradient), wider maps keep blocks of COLUMNS. Both equal the reference."""
    from codegen.numba_cpu import schedules
    assert schedules.WHOLE_ROW < 16400
    g, fused = _gelu_column_sum([5, columns], [], [vi("gx", [5, columns])])
    assert fused
    maps = [n for n in g.nodes.values() if isinstance(n, MapNode) and schedules.choose(n) == "columns"]
    assert len(maps) == 1
    ks = kernel_source(maps[0], g)
    assert ("for qb in range(" in ks.source) == (columns > schedules.WHOLE_ROW)
    assert ks.schedule == ("columns innermost, blocks of 256 columns" if columns > schedules.WHOLE_ROW
                           else "columns innermost, whole rows")
    _same_as_reference(g, 1e-5)


def test_column_reduction_splits_its_rows_across_threads(monkeypatch):
    """In a parallel kernel a large row sweep of a column reduction runs as ``prange`` over a fixed number
    of row chunks, each summing into its own partials (combined in chunk order): the same bits on 1 and
    2 threads, the reference's values, and every chunk flushes subnormals itself (it calls a fast form).
    A sweep of fewer than ``ROW_SPLIT_MIN`` points stays serial."""
    from codegen.numba_cpu import schedules
    g, fused = _gelu_column_sum([600, 300], [], [vi("gx", [600, 300])])
    assert fused
    (m,) = [n for n in g.nodes.values() if isinstance(n, MapNode) and schedules.choose(n) == "columns"]
    assert 600 * 300 < schedules.ROW_SPLIT_MIN and not kernel_source(m, g, parallel=True).parallel
    monkeypatch.setattr(schedules, "ROW_SPLIT_MIN", 600 * 300)
    ks = kernel_source(m, g, parallel=True)
    assert ks.parallel and "for ck in prange(nch0):" in ks.source
    assert ks.schedule == f"columns innermost, whole rows, 1 row sweep in {schedules.ROW_CHUNKS} chunks, prange"
    assert "mxc = _ftz_on()" in ks.source and "_ftz_off(mxc)" in ks.source
    lines = ks.source.splitlines()
    at = lines.index("    for ck in prange(nch0):")
    assert lines[at + 1] == "        mxc = _ftz_on()" and "# flush" not in ks.source       # first in each chunk
    assert f"min({schedules.ROW_CHUNKS}, " in ks.source
    feeds = feeds_for(g)
    runs = [CompiledGraph(g, threads=n).run(feeds) for n in (1, 2)]
    assert all(np.array_equal(runs[0][k], runs[1][k]) for k in runs[0])
    assert compare(reference(g, feeds), runs[1], 1e-5) == []


def test_column_map_keeping_a_last_row_stays_serial():
    """A sweep writing a column's value at every row without a wcr (the last row wins) cannot be split."""
    from codegen.numba_cpu import kernel_cache, schedules
    rows, cols = 400, 200
    g = Graph("g")
    g.add_container(Container("x", (rows, cols), "float32", Role.INPUT))
    g.add_container(Container("y", (cols,), "float32", Role.OUTPUT))
    g.inputs, g.outputs = ["x"], ["y"]
    r, c = E.Var("r"), E.Var("c")
    sweep = MapNode("s", [("r", Range.of(0, rows))], [Tasklet("t", E.Var("a"), {"a": Memlet("x", (r, c))},
                                                                  Memlet("y", (c,)))])
    m = MapNode("m", [("c", Range.of(0, cols))], [sweep])
    finalize(m, g)
    assert schedules.choose(m) == "columns"
    ks = kernel_source(m, g, parallel=True)
    assert not ks.parallel and "prange" not in ks.source and ks.schedule == "columns innermost, whole rows"
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    y = np.zeros(cols, np.float32)
    kernel_cache.load(ks)(*[{"x": x, "y": y}[a] for a in ks.arrays], *ks.extents)
    np.testing.assert_array_equal(y, x[-1])


def _bias_residual_layernorm(shape=(6, 40)) -> Graph:
    """bias + residual + LayerNorm, fused into one map over rows (three sweeps per row)."""
    from tests.peer.test_export_fixtures import fuse_everything
    from transforms.registry import create
    rng = np.random.default_rng(3)
    hidden = shape[-1]
    inits = [numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), n) for n in ("b", "g", "beta")]
    nodes = [helper.make_node("Add", ["x", "b"], ["h"]), helper.make_node("Add", ["h", "r"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "g", "beta"], ["y"], axis=-1, epsilon=1e-5)]
    g = import_proto(model(nodes, [vi("x", list(shape)), vi("r", list(shape))], [vi("y", list(shape))], inits))
    fuse_everything(g)
    rf = create("reduction_fusion")
    while (mt := next((m for m in rf.matches(g) if rf.check(g, m).ok), None)) is not None:
        rf.rewrite(g, mt, 1)
    return g


@pytest.mark.parametrize("shape", [(6, 512), (2, 3, 512), (1, 512)])
def test_sweeps_recomputing_one_value_share_a_row_buffer(shape):
    """The LayerNorm sweeps read bias + residual from a row buffer (``rowcache``), and the first sweep
    of the next row runs inside the last sweep of this one (two buffers, skewed along the last row
    param): x and r are read once per row, results are the reference's."""
    from codegen.numba_cpu import rowcache, schedules
    g = _bias_residual_layernorm(shape)
    (m,) = [n for n in g.nodes.values() if isinstance(n, MapNode)]
    assert schedules.choose(m) == "default"
    cache = rowcache.plan(m, {"y"})
    assert cache is not None and len(cache.sweeps) == 3 and cache.length == 2
    assert rowcache.can_skew(m, cache, parallel=False) and cache.skew and not cache.chunked
    assert rowcache.can_skew(m, cache, parallel=True) == (len(shape) > 2)   # never across prange rows
    chunked = rowcache.plan(m, {"y"}, parallel=True)         # one row param under prange: blocks of rows
    assert chunked.skew and chunked.chunked == (len(shape) == 2)
    ks = kernel_source(m, g)
    assert ks.schedule == "rows, 2 values cached over 3 sweeps, skewed"
    text = ks.source
    residual_reads = re.findall(r"\+ a2\[([^\]]*)\]", text)
    assert "cur, nxt = (c0, c1)" in text and len(residual_reads) == 2, text       # prologue, next row
    assert all("pn" in ix.split(", ") for ix in residual_reads), residual_reads
    assert text.count("= cur[") == 3, text
    _same_as_reference(g, 1e-5)


def test_short_rows_are_swept_again_instead_of_cached():
    """Below ``ROWCACHE_MIN`` points a row is cheaper to re-read from L1 than to buffer and skew."""
    from codegen.numba_cpu import rowcache, schedules
    g = _bias_residual_layernorm((6, schedules.ROWCACHE_MIN // 4))
    (m,) = [n for n in g.nodes.values() if isinstance(n, MapNode)]
    assert rowcache.plan(m, {"y"}) is not None                 # it could be cached ...
    ks = kernel_source(m, g)
    text = ks.source
    assert "cur" not in text and "nxt" not in text, text        # ... but is swept three times
    assert ks.schedule == "map order"
    _same_as_reference(g, 1e-5)


def test_sweeps_that_differ_get_no_row_buffer():
    """A softmax over a raw input has nothing to cache: every sweep reads x itself (one load)."""
    from codegen.numba_cpu import rowcache
    m = model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [vi("x", [4, 8])], [vi("y", [4, 8])])
    g = import_proto(m)
    lowering.expand_all(g)
    (sm,) = [n for n in g.nodes.values() if isinstance(n, MapNode)]
    assert rowcache.plan(sm, {"y"}) is None
    _same_as_reference(g, 1e-5)


def test_gelu_prints_as_one_fast_form_with_the_opaque_zero():
    """GELU's erf expansion becomes ``fast_gelu(t, z0)``; ``z0`` comes from a trailing zero extent."""
    from codegen.numba_cpu.loopnest import ZERO
    m = model([helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")], [vi("x", [4, 8])], [vi("y", [4, 8])])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    g = import_proto(m)
    lowering.expand_all(g)
    (gm,) = [n for n in g.nodes.values() if isinstance(n, MapNode)]
    ks = kernel_source(gm, g)
    assert "fast_gelu(" in ks.source and "erf" not in ks.source
    assert ks.helpers == ("_ftz_off", "_ftz_on", "fast_gelu")            # subnormals flush inside (flush.py)
    assert "mx = _ftz_on()" in ks.source and ks.source.rstrip().endswith("_ftz_off(mx)")
    assert ks.extents[-1] == 0 and f"{ZERO} = np.float32(n{len(ks.extents) - 1})" in ks.source
    _same_as_reference(g, 1e-5)


@pytest.mark.parametrize("shape", [(2, 32768, 4), (65536, 4), (130, 512)])   # 130: a last block of 2 rows
def test_row_buffers_of_a_prange_kernel_are_per_row_block(shape, monkeypatch):
    """With ``prange`` over the rows each thread's iterations allocate their own buffers; with one
    row param the rows run in blocks of ``CHUNK_ROWS``, each skewed on its own: the parallel kernel
    equals the serial one (up to the summation order the compiler picks for each). Rows of any
    length are cached here (``ROWCACHE_MIN`` 0) so that many rows stay cheap to test."""
    from codegen.numba_cpu import kernel_cache, schedules
    monkeypatch.setattr(schedules, "ROWCACHE_MIN", 0)
    g = _bias_residual_layernorm(shape)
    (m,) = [n for n in g.nodes.values() if isinstance(n, MapNode)]
    serial, par = kernel_source(m, g), kernel_source(m, g, parallel=True)
    assert par.parallel and "prange" in par.source and "cur, nxt" in par.source
    assert ("for pc in prange(" in par.source) == (len(shape) == 2)
    rng = np.random.default_rng(0)
    outs = []
    for ks in (serial, par):
        args = [rng.standard_normal(g.containers[c].concrete_shape(g.bindings)).astype(np.float32) for c in ks.arrays]
        rng = np.random.default_rng(0)
        kernel_cache.load(ks)(*args, *ks.extents)
        outs.append(args[ks.arrays.index("y")])
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=2e-6)


def test_row_buffer_without_row_params():
    """A LayerNorm over a whole 1-D tensor is one row and no row loop: buffer, no skew."""
    g = _bias_residual_layernorm((1024,))
    (m,) = [n for n in g.nodes.values() if isinstance(n, MapNode)]
    text = kernel_source(m, g).source
    assert "c0 = np.empty(" in text and "nxt" not in text, text
    _same_as_reference(g, 1e-5)


def test_a_kernel_is_parallel_exactly_when_it_runs_a_prange(monkeypatch):
    """A schedule may put the param ``schedules.parallel_safe`` chose inside (a column sum over rows runs its rows
    outermost): such a kernel is serial — no ``parallel=True`` without a ``prange`` (numba warns at every
    compile, and the step's schedule would keep it from running beside another statement)."""
    from pathlib import Path

    from codegen.numba_cpu import schedules
    from codegen.numba_cpu.backend import program as cpu_program
    from studio.session.exporting import load_with_history
    examples = Path(__file__).resolve().parents[3] / "resources" / "examples"
    graph, _ = load_with_history(str(examples / "bert_layer_base_train.onnx"),
                                 str(examples / "bert_layer_base_train.history.json"), [])
    monkeypatch.setattr(schedules, "PARALLEL_MIN_ITERS", 1)          # every safe kernel asks for prange
    kinds = [(ks.parallel, "prange(" in ks.source, "parallel=True" in ks.source)
             for ks in cpu_program(graph, parallel=True).kernels.values()]
    assert all(a == b == c for a, b, c in kinds), [k for k in kinds if len(set(k)) > 1]
    assert any(k[0] for k in kinds) and any(not k[0] for k in kinds)


def test_row_buffer_loops_start_where_the_row_range_starts():
    """A row-cached map over rows 1… leaves row 0 alone (its loops printed the stop only, and wrote row 0)."""
    from codegen.numba_cpu import rowcache
    g = _bias_residual_layernorm((3, 2, 512))
    feeds = feeds_for(g)
    whole = reference(g, feeds)["y"]
    (m,) = [n for n in g.nodes.values() if isinstance(n, MapNode)]
    p, r = m.params[0]
    m.params[0] = (p, Range(E.Const(1, "int64"), r.stop, 1))
    assert rowcache.plan(m, {"y"}) is not None and "for p0 in range(n0, n1):" in kernel_source(m, g).source
    got = _same_as_reference(g, 1e-5, feeds).run(feeds)["y"]
    assert not got[0].any() and np.array_equal(reference(g, feeds)["y"][1:], whole[1:])
