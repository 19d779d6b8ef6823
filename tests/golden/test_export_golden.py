"""Golden text of the exported module of the bundled example (the recipe applied): it reads like
torch.fx output. Lines of at most 120 characters, names that are whole words of the model's names,
a header that summarizes the 514-step history instead of listing it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.golden.golden import check_golden
from tests.golden.kernels import check_kernels

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

EXAMPLES = Path(__file__).resolve().parents[2] / "resources" / "examples"
MODEL, HISTORY = EXAMPLES / "bert_layer_base_train.onnx", EXAMPLES / "bert_layer_base_train.history.json"


@pytest.fixture(scope="module")
def exported():
    from codegen.export.package import header
    from codegen.numba_cpu.backend import program
    from codegen.program.module import module_text
    from codegen.program.module_plan import plan_module
    from codegen.program.schedule import fork_join
    from studio.session.exporting import load_with_history
    graph, steps = load_with_history(str(MODEL), str(HISTORY), [])
    prog = program(graph)
    head = header(graph, steps, "golden", HISTORY)
    plan = plan_module(prog, fork_join(prog, 2))         # as export_package does
    return prog, module_text(prog, mode="export", doc="The bundled example, exported (golden test).", header=head,
                             plan=plan), graph


def test_bundled_model_py(exported, update_golden):
    check_golden("bundled_model_py", exported[1], update_golden)


def test_bundled_kernel_bodies(exported, update_golden):
    """Every kernel of the bundled example after its recipe, serial and with ``prange``, CPU and CUDA."""
    from codegen.cupy_cuda.backend import CUDA
    from codegen.numba_cpu.backend import CPU, program
    from codegen.program.program import build_program
    serial, graph = exported[0], exported[2]
    check_kernels("bundled_cpu", {n: CPU.kernel_module(ks) for n, ks in serial.kernels.items()}, update_golden)
    parallel = program(graph, parallel=True)
    check_kernels("bundled_cpu_parallel", {n: CPU.kernel_module(ks) for n, ks in parallel.kernels.items()}, update_golden)
    cuda = build_program(graph, CUDA.renderer())
    check_kernels("bundled_cuda", {n: CUDA.kernel_module(ks) for n, ks in cuda.kernels.items()}, update_golden)


def test_lines_fit_in_120_characters_and_the_module_compiles(exported):
    text = exported[1]
    long = [(k, len(line)) for k, line in enumerate(text.splitlines(), start=1) if len(line) > 120]
    assert not long, f"lines over 120 characters (line, length): {long[:10]}"
    compile(text, "model.py", "exec")


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[^0-9A-Za-z]+", name) if w]


def _whole_words_of(var: str, name: str) -> bool:
    """``var`` (less a dedupe suffix ``_<k>``) is a run of whole words ending ``name``'s words (an
    ONNX ``output 0`` suffix may be dropped)."""
    words, source = _words(var), _words(name)
    if source[-2:] == ["output", "0"] and words[-2:] != ["output", "0"]:
        source = source[:-2]
    for candidate in (words, words[:-1]):             # as is, or less a dedupe suffix
        if candidate and source[len(source) - len(candidate):] == candidate:
            return True
    return False


def test_names_are_whole_words_of_the_model_names(exported):
    prog = exported[0]
    names = {c: prog.var(c) for c in prog.graph.containers if ("c", c) in prog.ns}
    bad = [(var, c) for c, var in names.items() if not _whole_words_of(var, c)]
    assert not bad and len(names) > 100, f"names cut mid-word or renamed: {bad[:10]}"
    accumulators = [prog.var(t) for t in prog.temps]
    assert accumulators and all(a.endswith("_acc") and a[:-4] in names.values() for a in accumulators), accumulators


def test_the_header_summarizes_the_history(exported):
    head = exported[1].split("\n\n")[0]
    assert len(head.splitlines()) <= 10
    assert "# history: 514 steps from bert_layer_base_train.history.json (file sha256 " in head
    assert re.search(r"#   constant_folding x\d+, .*map_fusion x\d+", head.replace("\n#     ", " "))
