"""Block reductions of the CUDA backend: which maps take them, what they print, and that they compute
the reference's values — on the host through ``cuda_emulation`` (g++ against an emulation of threads,
warps, shuffles, barriers and shared memory), and on a device when one exists (skipped here with the
reason "no CUDA device"). Compiling every kernel with NVRTC is ``test_cuda_compile.py``'s job."""
from __future__ import annotations

import collections
import re
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from codegen.cupy_cuda import reduction_pattern as RP
from codegen.cupy_cuda.device_lib import PRELUDE
from codegen.cupy_cuda.render import kernel_source
from codegen.cupy_cuda.backend import kernel_module
from codegen.cupy_cuda.launch import grid_blocks
from codegen.program.prepare import lower_for_codegen
from codegen.numpy_ref.executor import run
from ir import expr as E
from ir.containers import Container
from ir.graph import Graph
from ir.memlet import Memlet, Range, Wcr
from ir.nodes import MapNode, Tasklet
from ir.onnx_import import import_proto
from tests.unit.codegen import cuda_emulation
from tests.unit.ir.onnx_models import vi

EXAMPLES = Path(__file__).resolve().parents[3] / "resources" / "examples"
SOFTMAX = "fused:/layer/attention/self/Mul/expanded"
LAYERNORM = "fused:/layer/attention/output/dense/Add/expanded"
LAYERNORM_GRAD = "fused:/layer/output/LayerNorm/Mul/LayerNormFusion/_Grad/LayerNormalizationGrad_0/expanded"
SOFTMAX_GRAD = "fused:/layer/attention/self/Softmax_Grad/SoftmaxGrad_13_0/expanded"
BIAS_GRAD = "fused:/layer/attention/self/value/Add_Grad/ReduceSum_1/expanded"
GELU_BIAS_GRAD = "fused:Gelu_Grad/GeluGrad_0/expanded"
REDUCE_MEAN = "onnx::ReduceMean::7/expanded"


@pytest.fixture(scope="module")
def recipe() -> Graph:
    from studio.session.exporting import load_with_history
    g, _ = load_with_history(str(EXAMPLES / "bert_layer_base_train.onnx"),
                             str(EXAMPLES / "bert_layer_base_train.history.json"), [])
    return lower_for_codegen(g)


def _body(ks) -> str:
    assert ks.source.startswith(PRELUDE)
    return ks.source[len(PRELUDE):]


# --- (a) which maps take the block paths, and what they print ----------------------------------------

def test_the_bundled_recipe_has_eleven_block_reductions(recipe):
    kinds = collections.Counter(kernel_source(m, recipe).launch.kind for m in recipe.nodes.values()
                                if isinstance(m, MapNode))
    assert kinds == {"rows": 5, "columns": 4, "warp_rows": 2, "points": 7}
    expected = {SOFTMAX: "warp_rows", SOFTMAX_GRAD: "warp_rows", LAYERNORM: "rows", LAYERNORM_GRAD: "rows",
                REDUCE_MEAN: "rows", BIAS_GRAD: "columns", GELU_BIAS_GRAD: "columns"}
    assert {k: kernel_source(recipe.nodes[k], recipe).launch.kind for k in expected} == expected


def test_attention_softmax_is_half_a_warp_per_row(recipe):
    ks = kernel_source(recipe.nodes[SOFTMAX], recipe)
    body = _body(ks)
    # 12,288 rows fill blocks of 8: each warp takes two rows, 16 lanes and 8 points per lane each
    assert "__shfl_xor_sync" in PRELUDE and "dcs_lanes<2, 16>(s0)" in body and "dcs_lanes<0, 16>(s1)" in body
    assert ks.launch.block == (32, 4) and ks.launch.grid == 8 * 12 * 128 // 8 and ks.launch.shared_bytes == 0
    assert "__launch_bounds__(128)" in body and "blockIdx.x * 8 + threadIdx.y * 2 + threadIdx.x / 16" in body
    assert "for (int it = 0; it < 8; ++it)" in body and "j = (threadIdx.x % 16) + it * 16;" in body
    assert "__syncthreads" not in body and "if (j < " not in body       # 128 = 4 × 32: no guard
    # the scores are loaded once (max pass) into registers and read from there by the sum and the output
    assert body.count("= a0[") == 1 and body.count("c0[it] = a0[") == 1 and body.count("c0[it] * 0.125f") == 3


def test_layernorm_forward_is_one_block_per_row(recipe):
    ks = kernel_source(recipe.nodes[LAYERNORM], recipe)
    body = _body(ks)
    assert ks.launch.kind == "rows" and ks.launch.block == (256, 1) and ks.launch.grid == 8 * 128
    assert body.count("__syncthreads();") == 2 and ks.launch.shared_bytes == 2 * 8 * 4   # sum, then sq_sum
    assert "long long rest = blockIdx.x;" in body and "j = threadIdx.x + it * 256;" in body
    # the three summands of the row (bias, residual, dense output) are read once, by the mean's pass;
    # scale and bias, read only by the output's pass, are prefetched there too (loads in flight before
    # the two barriers instead of after them)
    assert re.findall(r"float c\d\[3\];", body) == [f"float c{i}[3];" for i in range(5)]
    assert body.count("= a0[") == body.count("= a1[") == body.count("= a2[") == 1
    first_barrier = body.index("__syncthreads();")
    for scale_or_bias in ("c3[it] = a4[(p2)];   // prefetched", "c4[it] = a5[(p2)];   // prefetched"):
        assert body.index(scale_or_bias) < first_barrier
    assert "* c3[it]) + c4[it])" in body
    assert body.count("if (threadIdx.x == 0)") == 2                                        # saved mean, inv std


def test_layernorm_backward_reduces_both_sums_at_one_barrier(recipe):
    ks = kernel_source(recipe.nodes[LAYERNORM_GRAD], recipe)
    body = _body(ks)
    assert ks.launch.kind == "rows" and body.count("__syncthreads();") == 2   # the sums; the next row's slots
    assert "if (lane == 0) { dcs_s0[warp] = s0; dcs_s1[warp] = s1; }" in body
    # dbias, dscale and the fused dense bias gradient are shared by every row: each block sums its 4 rows
    # in registers and adds them once, after its rows (a quarter of the atomics of one row per block)
    assert ks.launch.per_block == 4 and ks.launch.grid == 8 * 128 // 4
    assert "for (int rr = 0; rr < 4; ++rr)" in body and body.count("atomicAdd(") == 3
    assert body.index("atomicAdd(") > body.rindex("__syncthreads();")
    assert re.findall(r"g\d\[it\] \+=", body) == ["g0[it] +=", "g1[it] +=", "g2[it] +="]


def test_bias_gradient_is_a_column_reduction(recipe):
    ks = kernel_source(recipe.nodes[BIAS_GRAD], recipe)
    body = _body(ks)
    # 768 columns are 24 tiles of 32: each tile's 1,024 rows are split over 8 blocks of 128 rows
    assert ks.launch.kind == "columns" and ks.launch.block == (32, 32) and ks.launch.grid == 8 * 768 // 32
    assert ks.extents == (8, 768) and ks.threads == 2
    assert "__shared__ float dcs_s0[32][32];" in body and ks.launch.shared_bytes == 4096 + 4 + 32 * 4
    assert "dcs_s0[threadIdx.y][threadIdx.x] = s0;" in body
    assert "j = lo + threadIdx.y; active && j < 1024 && j < lo + 128; j += 32" in body
    assert body.count("atomicAdd(") == 1 and f"atomicAdd(&{ks.name}_count[group], 1u) == 7u" in body
    # only the last block of a tile runs the fused AdamW update: m, v and the bias itself
    assert body.count("if (active && threadIdx.y == 0) { a") == 3
    assert body.index("if (!dcs_last[0]) return;") < body.index("{ a2[(p0)] =")


def test_a_full_reduction_is_split_over_blocks(recipe):
    ks = kernel_source(recipe.nodes[REDUCE_MEAN], recipe)
    body = _body(ks)
    # 786,432 points: 96 blocks of 1,024 threads take 8,192 each; the last to finish combines them
    assert ks.launch.kind == "rows" and ks.launch.grid == 96 and ks.launch.block == (1024, 1)
    assert ks.extents == (96,) and ks.threads == 1
    name = ks.name
    assert f"__device__ float {name}_p0[96];" in body and f"__device__ unsigned int {name}_count[1] = {{0}};" in body
    assert f"atomicAdd(&{name}_count[row], 1u) == 95u" in body and "if (!dcs_last[0]) return;" in body
    assert body.index(f"{name}_count[row] = 0;") < body.index("a1[0] =")     # reset before the result


def test_points_schedule_and_other_maps_keep_one_thread_per_point(recipe):
    ks = kernel_source(recipe.nodes[SOFTMAX], recipe, schedule="points")
    assert ks.launch.kind == "points" and "dcs_warp" not in _body(ks) and "tid >= " in _body(ks)
    with pytest.raises(ValueError, match="unknown schedule"):
        kernel_source(recipe.nodes[SOFTMAX], recipe, schedule="warps")


def test_fixture_graphs_take_the_block_paths(fixtures_dir):
    from tests.peer.test_export_fixtures import fixture_graph
    g = lower_for_codegen(fixture_graph(fixtures_dir, "joint/tiny_resnet_joint", False)[0])
    kinds = collections.Counter(kernel_source(m, g).launch.kind for m in g.nodes.values()
                                if isinstance(m, MapNode))
    assert kinds["rows"] >= 10 and kinds["warp_rows"] >= 1
    small = lower_for_codegen(fixture_graph(fixtures_dir, "ort/bert_layer_small/train_step_adamw", True)[0])
    plans = {m.id: RP.plan_for(m, small) for m in small.nodes.values() if isinstance(m, MapNode)}
    ln_grad = [p for k, p in plans.items() if "LayerNormalizationGrad" in k]
    assert ln_grad and all(p and p.kind == "warp_rows" for p in ln_grad)        # rows of 64
    softmax = [p for k, p in plans.items() if k.endswith("Softmax/expanded")]
    assert softmax and all(p.reason.startswith("rows of 16 < 32") for p in softmax)


# --- pure-Python pieces: pattern refusals and launch shapes ----------------------------------------

def _row_map(*, read_own=False, plain_local=False, racy=False, dependent=False) -> MapNode:
    """map[i=0:64] { local s; map[r=0:256] { s (wcr=sum) = x[i, r] }; y[i] = s } and near misses."""
    i, r = E.Var("i"), E.Var("r")
    stop = E.Bin("add", i, E.Const(1, "int64")) if dependent else E.Const(256, "int64")
    inner = [Tasklet("acc", E.Var("v"), {"v": Memlet("x", (i, r))}, Memlet("s", None, None, None if plain_local
                                                                               else "sum"))]
    if read_own:
        inner.append(Tasklet("use", E.Var("v"), {"v": Memlet("s")}, Memlet("z", (i, r))))
    if racy:
        inner.append(Tasklet("last", E.Var("v"), {"v": Memlet("x", (i, r))}, Memlet("w", (i,))))
    body = [MapNode("n", [("r", Range(E.Const(0, "int64"), stop, 1))], inner),
            Tasklet("out", E.Var("v"), {"v": Memlet("s")}, Memlet("y", (i,)))]
    return MapNode("m", [("i", Range.of(0, 64))], body, locals={"s": Container("s", (), "float32")})


@pytest.mark.parametrize("kwargs,reason", [
    ({"read_own": True}, "'s' is read inside the nested map that reduces it"),
    ({"plain_local": True}, "map local 's' is written without a wcr inside a nested map"),
    ({"racy": True}, "'w' is written inside a nested map at an index that does not hold every param"),
    ({"dependent": True}, "nested param 'r' has a range that depends on another param"),
])
def test_near_misses_say_why(kwargs, reason):
    assert RP.plan_for(_row_map(), Graph()).kind == "rows"
    refusal = RP.plan_for(_row_map(**kwargs), Graph())
    assert not refusal and refusal.reason.startswith(reason)


def test_a_map_reading_what_it_writes_is_refused():
    m = _row_map()
    m.body.append(Tasklet("again", E.Var("v"), {"v": Memlet("y", (E.Var("i"),))}, Memlet("q", (E.Var("i"),))))
    assert RP.plan_for(m, Graph()).reason == "the map reads 'y', which it also writes: threads of a block would race"


def test_launch_shapes_follow_the_row_length():
    assert [RP.row_block(n) for n in (129, 300, 768, 1024, 3072, 786432)] == [64, 128, 256, 256, 1024, 1024]
    assert RP.choose_shape("rows", 128) == ("warp_rows", (32, 4), 4)
    assert RP.choose_shape("rows", 32) == ("warp_rows", (32, 4), 4)
    assert RP.choose_shape("rows", 129) == ("rows", (64, 1), 1)
    assert not RP.choose_shape("rows", 31)
    assert [RP.column_split(n) for n in (64, 100, 200, 1024, 10**6)] == [4, 4, 8, 32, 32]
    assert RP.choose_shape("columns", 1024) == ("columns", (32, 32), 32) and not RP.choose_shape("columns", 63)


def test_grid_formula_and_the_exported_launcher_agree(recipe):
    assert grid_blocks([8, 12, 128], 3, 4, False) == 3072
    assert grid_blocks([3, 40], 2, 32, True) == 3 * 2 and grid_blocks([], 0, 1, False) == 1
    assert grid_blocks([1000], 1, 256, False) == 4 and grid_blocks([0, 5], 2, 1, False) == 0
    for m in recipe.nodes.values():
        if isinstance(m, MapNode):
            ks = kernel_source(m, recipe)
            launcher: dict = {}
            exec(compile(kernel_module(ks), ks.name, "exec"), launcher)      # imports cupy: no device needed
            assert launcher["BLOCK"] == ks.launch.block
            got = launcher["grid_blocks"](list(ks.extents), launcher["N_THREAD_EXTENTS"], launcher["PER_BLOCK"],
                                          launcher["SPLIT_LAST"])
            assert got == ks.launch.grid > 0


def test_static_shared_memory_in_ptx_matches_the_record(recipe):
    from cupy.cuda import nvrtc as raw
    from codegen.cupy_cuda.nvrtc import available, include_dir
    if available():
        pytest.skip(available())
    for key in (LAYERNORM, LAYERNORM_GRAD, BIAS_GRAD, SOFTMAX, REDUCE_MEAN):
        ks = kernel_source(recipe.nodes[key], recipe)
        prog = raw.createProgram(ks.source, "k.cu", [], [])
        raw.compileProgram(prog, ["-arch=sm_80", "-std=c++17", f"-I{include_dir()}"])
        ptx = raw.getPTX(prog)
        ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
        raw.destroyProgram(prog)
        shared = sum(int(n) for n in re.findall(r"\.shared \.align \d+ \.b8 \S+\[(\d+)\];", ptx))
        shared += sum(int(bits) // 8 for bits in re.findall(r"\.shared \.align \d+ \.[bsuf](\d+) [^\[\s;]+;", ptx))
        assert shared == ks.launch.shared_bytes, key


# --- (c, d) running the kernels: host emulation here, the device where there is one ----------------

def _graph(op: str, shape: list[int], out_shape: list[int], *, domain: str = "", extra=(), inits=(),
           dt=TensorProto.FLOAT, **attrs):
    inputs = [vi("x", shape, dt)] + [vi(n, s, dt) for n, s in extra]
    node = helper.make_node(op, ["x"] + [n for n, _ in extra] + [i.name for i in inits], ["y"], domain=domain, **attrs)
    g = helper.make_graph([node], op, inputs, [vi("y", out_shape, dt)], list(inits))
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return lower_for_codegen(import_proto(helper.make_model(g, opset_imports=opsets)))


def _ln_grad(rows: int = 3, width: int = 300):
    inputs = [vi("dy", [2, rows, width]), vi("x", [2, rows, width]), vi("scale", [width]),
              vi("mean", [2, rows, 1]), vi("inv", [2, rows, 1])]
    node = helper.make_node("LayerNormalizationGrad", [i.name for i in inputs], ["dx", "dscale", "dbias"],
                            domain="com.microsoft", axis=-1)
    outs = [vi("dx", [2, rows, width]), vi("dscale", [width]), vi("dbias", [width])]
    g = helper.make_graph([node], "lng", inputs, outs)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return lower_for_codegen(import_proto(helper.make_model(g, opset_imports=opsets)))


def _axes(*a):
    return [numpy_helper.from_array(np.array(a, np.int64), "axes")]


CASES = {   # name: (graph builder, expected launch kind)
    "softmax_rows": (lambda: _graph("Softmax", [2, 3, 200], [2, 3, 200], axis=-1), "rows"),
    "logsoftmax_warp": (lambda: _graph("LogSoftmax", [5, 100], [5, 100], axis=-1), "warp_rows"),
    "layernorm_rows": (lambda: _graph("LayerNormalization", [6, 300], [6, 300], extra=[("s", [300]), ("b", [300])],
                                      axis=-1), "rows"),
    "layernorm_grad_rows": (_ln_grad, "rows"),
    # 2 × 515 rows: 4 rows per block sum dscale/dbias in registers; the last block has 2 rows
    "layernorm_grad_summing_blocks": (lambda: _ln_grad(515, 160), "rows"),
    "column_sum": (lambda: _graph("ReduceSum", [200, 40], [40], inits=_axes(0), keepdims=0), "columns"),
    "column_max_lead": (lambda: _graph("ReduceMax", [3, 77, 9], [3, 9], axes=[1], keepdims=0), "columns"),
    "prod_warp": (lambda: _graph("ReduceProd", [3, 40], [3], axes=[1], keepdims=0), "warp_rows"),
    "mean_all": (lambda: _graph("ReduceMean", [4, 50, 30], [], axes=[0, 1, 2], keepdims=0), "rows"),
    # rows of ≥ 65,536 points split over blocks; the last block of each row combines the partials
    "mean_all_split": (lambda: _graph("ReduceMean", [2, 300, 128], [], axes=[0, 1, 2], keepdims=0), "rows"),
    "sum_rows_split": (lambda: _graph("ReduceSum", [3, 65600], [3], inits=_axes(1), keepdims=0), "rows"),
    # long columns in few column tiles: their rows split over blocks too
    "column_sum_split": (lambda: _graph("ReduceSum", [600, 40], [40], inits=_axes(0), keepdims=0), "columns"),
    "column_max_lead_split": (lambda: _graph("ReduceMax", [3, 700, 9], [3, 9], axes=[1], keepdims=0), "columns"),
}
SPLIT = {"mean_all_split": 10, "sum_rows_split": 9}     # blocks per row
COLUMN_SPLIT = {"column_sum_split": 4, "column_max_lead_split": 5}   # blocks per column tile
NEAR_ONE = {"prod_warp"}          # a product of 40 standard normals under- and overflows; of values near 1 not


def _case(name: str, storage=None, seed=0):
    """(kernel, arrays for it, expected outputs) of the one block-reduction map of case ``name``."""
    g = CASES[name][0]()
    [m] = [m for m in g.nodes.values() if isinstance(m, MapNode) and RP.plan_for(m, g)]
    ks = kernel_source(m, g, storage=storage)
    rng = np.random.default_rng(seed)
    feeds = {}
    for n in g.inputs:
        x = rng.standard_normal(g.containers[n].concrete_shape(g.bindings))
        feeds[n] = (1 + 0.02 * x if name in NEAR_ONE else np.abs(x) + 0.5 if n == "inv" else x).astype(np.float32)
    values = run(g, feeds, outputs=list(ks.arrays))
    return ks, _launch_arrays(ks, values), {c: values[c] for c in ks.outputs}


def _launch_arrays(ks, values: dict) -> dict:
    """The kernel's inputs as computed; its outputs as the launcher initializes them (NaN where it does not)."""
    arrays = {c: values[c] for c in ks.arrays if c not in ks.outputs}
    for c in ks.outputs:
        init, v = ks.init[c], values[c]
        fill = np.nan if init.kind == "empty" else 0 if init.kind == "zeros" else Wcr(init.wcr).identity(v.dtype)
        arrays[c] = np.full(v.shape, fill, v.dtype)
    return arrays


def _assert_close(got: dict, want: dict, rtol: float) -> None:
    for c, w in want.items():
        scale = max(float(np.abs(w).max()), 1e-30)
        err = float(np.abs(np.asarray(got[c], np.float64) - w).max()) / scale
        assert err <= rtol, f"{c}: relative error {err:.3g} > {rtol}"


@pytest.fixture(scope="module")
def emulator():
    reason = cuda_emulation.available()
    if reason:
        pytest.skip(reason)


@pytest.mark.parametrize("name", sorted(CASES))
def test_block_kernels_compute_the_reference_in_host_emulation(emulator, tmp_path, name):
    ks, arrays, want = _case(name)
    assert ks.launch.kind == CASES[name][1]
    assert ks.launch.per_block == (4 if name == "layernorm_grad_summing_blocks" else ks.launch.per_block)
    split = name in SPLIT or name in COLUMN_SPLIT
    assert (f"{ks.name}_count" in ks.source) == split
    if name in SPLIT:
        rows = int(np.prod(ks.extents[:-1], dtype=np.int64))
        assert ks.extents[-1] == SPLIT[name] and ks.launch.grid == rows * SPLIT[name]
    if name in COLUMN_SPLIT:
        *lead, cols = ks.extents[1:]
        assert ks.extents[0] == COLUMN_SPLIT[name]
        assert ks.launch.grid == COLUMN_SPLIT[name] * int(np.prod(lead, dtype=np.int64)) * -(-cols // 32)
    # twice in one process: a split's block counts must be back at zero for the next launch
    _assert_close(cuda_emulation.emulate(ks, arrays, tmp_path, launches=2 if split else 1), want, 2e-6)


FLOAT64_CASES = {
    "softmax_rows": lambda: _graph("Softmax", [2, 3, 200], [2, 3, 200], axis=-1, dt=TensorProto.DOUBLE),
    "layernorm_rows": lambda: _graph("LayerNormalization", [6, 300], [6, 300], extra=[("s", [300]), ("b", [300])],
                                     axis=-1, dt=TensorProto.DOUBLE),
    "mean_all_split": lambda: _graph("ReduceMean", [2, 300, 128], [], axes=[0, 1, 2], keepdims=0,
                                     dt=TensorProto.DOUBLE),
    "column_max_lead_split": lambda: _graph("ReduceMax", [3, 700, 9], [3, 9], axes=[1], keepdims=0,
                                            dt=TensorProto.DOUBLE),
}


@pytest.mark.parametrize("name", sorted(FLOAT64_CASES))
def test_float64_block_kernels_compute_in_double_in_host_emulation(emulator, tmp_path, name):
    """A float64 model's block kernels keep float64 (their exp was ``expf``, 1e-8 off): within 64 float64 units."""
    g = FLOAT64_CASES[name]()
    [m] = [m for m in g.nodes.values() if isinstance(m, MapNode) and RP.plan_for(m, g)]
    ks = kernel_source(m, g)
    assert ks.launch.kind == CASES[name][1] and set(ks.storage.values()) == {"float64"}
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(g.containers[n].concrete_shape(g.bindings)) for n in g.inputs}
    values = run(g, feeds, outputs=list(ks.arrays))
    split = name in SPLIT or name in COLUMN_SPLIT
    got = cuda_emulation.emulate(ks, _launch_arrays(ks, values), tmp_path, launches=2 if split else 1)
    _assert_close(got, {c: values[c] for c in ks.outputs}, 64 * float(np.finfo(np.float64).eps))


HALF_WARP_CASES = {
    "softmax_16_rows": lambda: _graph("Softmax", [2, 8, 100], [2, 8, 100], axis=-1),
    "max_32_rows": lambda: _graph("ReduceMax", [32, 48], [32], axes=[1], keepdims=0),
}


@pytest.mark.parametrize("lanes", [16, 8])
@pytest.mark.parametrize("name", sorted(HALF_WARP_CASES))
def test_several_rows_per_warp_in_host_emulation(emulator, tmp_path, monkeypatch, name, lanes):
    """``ROW_LANES`` below 32: a warp takes 32 / lanes rows (twice or four times the points per thread,
    loads in flight), each reduced over its own lanes (``dcs_lanes``: a butterfly within the row's
    lanes, then its first lane's value) and stored by its first lane."""
    monkeypatch.setitem(CASES, name, (HALF_WARP_CASES[name], "warp_rows"))
    monkeypatch.setattr(RP, "ROW_LANES", lanes)
    ks, arrays, want = _case(name)
    body = _body(ks)
    assert ks.launch.kind == "warp_rows" and ks.launch.per_block == 4 * 32 // lanes
    assert f"dcs_lanes<2, {lanes}>(" in body and "dcs_warp<" not in body
    assert f"threadIdx.x / {lanes}" in body and f"(threadIdx.x % {lanes})" in body   # the row, the lane in it
    if name.startswith("max"):                     # one result per row: its first lane stores it
        assert f"if (threadIdx.x % {lanes} == 0)" in body
    _assert_close(cuda_emulation.emulate(ks, arrays, tmp_path), want, 2e-6)


def test_rows_that_do_not_fill_the_blocks_keep_a_warp_each(monkeypatch):
    monkeypatch.setattr(RP, "ROW_LANES", 16)
    ks, _, _ = _case("logsoftmax_warp")            # 5 rows: a half-filled warp would return half its lanes
    assert ks.launch.per_block == 4 and "dcs_warp<" in _body(ks) and "dcs_lanes<" not in _body(ks)


@pytest.mark.parametrize("name", ["softmax_rows", "layernorm_rows", "column_sum"])
def test_bfloat16_storage_block_kernels_in_host_emulation(emulator, tmp_path, name):
    ks, arrays, want = _case(name, storage="bfloat16")
    assert "__bfloat162float(" in _body(ks)
    _assert_close(cuda_emulation.emulate(ks, arrays, tmp_path), want, 2e-2)


def _emulate_recipe_kernel(ks, recipe, tmp_path) -> None:
    """Run one recipe kernel in host emulation on the reference's own inputs."""
    from codegen.numpy_ref.feeds import feeds_for
    values = run(recipe, feeds_for(recipe), outputs=list(ks.arrays))
    got = cuda_emulation.emulate(ks, _launch_arrays(ks, values), tmp_path)
    _assert_close(got, {c: values[c] for c in ks.outputs}, 1e-5)


def test_recipe_bias_gradient_with_adamw_in_host_emulation(emulator, tmp_path, recipe):
    _emulate_recipe_kernel(kernel_source(recipe.nodes[BIAS_GRAD], recipe), recipe, tmp_path)


def test_recipe_layernorm_with_the_loss_gradient_in_host_emulation(emulator, tmp_path, recipe):
    """The last LayerNorm fused with the MSE loss's square and gradient: Pow by 2 and by 1 print as a
    multiply and the value itself (powf was two thirds of the kernel's instructions), and the inputs
    only the output's pass reads (scale, bias, labels, the loss's scale) are prefetched by the first
    pass. Host-emulated against the reference."""
    node = next(n for n in recipe.nodes.values() if isinstance(n, MapNode)
                and (n.label or "").startswith("Add+Add>LayerNormalization>Sub+Pow+Pow"))
    ks = kernel_source(node, recipe)
    body = _body(ks)
    assert "powf(" not in body and body.count("dcs_sq(") == 1
    assert body.count("// prefetched") == 4 and body.index("// prefetched") < body.index("__syncthreads();")
    _emulate_recipe_kernel(ks, recipe, tmp_path)


def test_block_kernels_on_a_device(monkeypatch):
    cupy = pytest.importorskip("cupy", reason="cupy (the cuda extra) is not installed")
    try:
        present = cupy.is_available()
    except Exception:  # noqa: BLE001 - a driver error means: no device
        present = False
    if not present:
        pytest.skip("no CUDA device")
    lanes = {name: RP.ROW_LANES for name in CASES}
    for name, build in HALF_WARP_CASES.items():     # several rows per warp, as the variants may choose
        monkeypatch.setitem(CASES, name, (build, "warp_rows"))
        lanes[name] = 16
    for name in sorted(CASES):
        monkeypatch.setattr(RP, "ROW_LANES", lanes[name])
        for storage, rtol in ((None, 1e-5), ("bfloat16", 2e-2)):
            ks, arrays, want = _case(name, storage=storage)
            launcher: dict = {}
            exec(compile(kernel_module(ks), ks.name, "exec"), launcher)
            dev = {c: cupy.asarray(cuda_emulation.to_bf16_bits(a) if ks.storage[c] == "bfloat16" else a)
                   for c, a in arrays.items()}
            launcher[ks.name](*[dev[c] for c in ks.arrays], *ks.extents)
            cupy.cuda.runtime.deviceSynchronize()
            got = {c: cupy.asnumpy(dev[c]) for c in ks.outputs}
            got = {c: cuda_emulation.from_bf16_bits(v) if ks.storage[c] == "bfloat16" else v for c, v in got.items()}
            _assert_close(got, want, rtol)
