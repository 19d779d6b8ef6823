"""``check_supported(model)``: refuse, before anything is built, what autodiff cannot handle.

Every node of the forward model, including those inside subgraph attributes (``If``
branches, ``Loop``/``Scan`` bodies, at any depth), must be an op the studio claims
(``ir.claimed_ops``). Ops with subgraphs are never differentiated: an ``If`` whose
branch reads a float initializer would otherwise give that initializer a silent zero
gradient. The error names the node, the branch and the outer values the branch reads,
and says what to do.
"""
from __future__ import annotations

from typing import Iterator

from onnx import AttributeProto, GraphProto, ModelProto, NodeProto

from ir.claimed_ops import is_claimed
from ir.errors import GraphError, UnsupportedOpError
from ir.recurrent import RECURRENT_OPS
from transforms.autodiff.emitter import FLOAT_ELEMS
from transforms.autodiff.parameters import FOLDED_KEY, GENERATED_NAME, folded_sources
from transforms.autodiff.registry import NodeRef
from transforms.autodiff.sharing import module_of

SUBGRAPH_OPS = ("If", "Loop", "Scan")


class SubgraphOpError(UnsupportedOpError):
    """An op with a subgraph (If/Loop/Scan) in a model to be differentiated."""

    def __init__(self, node: NodeProto, where: str, branch: str, reads: list[str]) -> None:
        self.op_type = node.op_type
        shown = ", ".join(reads[:5]) + (", …" if len(reads) > 5 else "")
        uses = f"; its {branch} reads the float initializers {shown}, which would get no gradient" if reads else ""
        msg = ("training-graph generation does not differentiate through ops with subgraphs "
               f"(If, Loop, Scan){where}{uses}")
        hint = ("Export the model without data-dependent control flow (static shapes, no Python branching on "
                "tensor values; torch.cond/while_loop removed), or fold the condition with a constant-folding "
                "pass, then run train-graph again")
        GraphError.__init__(self, msg, NodeRef(node), hint=hint)


FOLD_RULE = "FuseBatchNormIntoConv"
RULE_KEY = "pkg.onnxscript.rewriter.rule_name"


class FoldedBatchNormError(GraphError):
    """A convolution the dynamo exporter's optimizer folded a BatchNorm into, in a model trained with batch
    statistics: the BatchNorm's parameters and statistics are gone, so the step could not be PyTorch's."""

    def __init__(self, node: NodeProto, count: int) -> None:
        bn = module_of(node)            # the fused node keeps the BatchNorm's name scopes
        msg = (f"the exporter folded {f'BatchNorm {bn}' if bn else 'a BatchNorm'} into this convolution "
               f"({FOLD_RULE}{f', and {count - 1} more' if count > 1 else ''}): its weight, bias and running "
               "statistics are gone, so a step with batch statistics cannot be the one PyTorch's train() takes")
        hint = ("Re-export with torch.onnx.export(..., dynamo=True, optimize=False), which keeps every BatchNorm, "
                "or with the legacy exporter in training mode (training=torch.onnx.TrainingMode.TRAINING); or "
                "pass --batchnorm eval to train the folded convolutions with frozen statistics")
        GraphError.__init__(self, msg, NodeRef(node), hint=hint)


def check_batchnorm_folding(model: ModelProto, batchnorm: str) -> None:
    """Raise ``FoldedBatchNormError`` when ``batchnorm`` is 'train' and the exporter folded BatchNorms away."""
    if batchnorm != "train":
        return
    folded = [n for n in model.graph.node
              if any(p.key == RULE_KEY and FOLD_RULE in p.value for p in n.metadata_props)]
    if folded:
        raise FoldedBatchNormError(folded[0], len(folded))


class FoldedRecurrentError(GraphError):
    """Recurrent weights the dynamo exporter's optimizer packed from several parameters into one constant:
    trained as such they would not be the model's parameters, and kept constant they would not train."""

    def __init__(self, node: NodeProto, value: str, sources: list[str]) -> None:
        msg = (f"the exporter packed this layer's weights '{value}' from {', '.join(sources)} into one constant "
               "(its optimizer folds the gate reordering), so they cannot train as the module's parameters")
        hint = ("Re-export with torch.onnx.export(..., dynamo=True, optimize=False), which keeps every parameter, "
                "or with the legacy exporter in training mode (training=torch.onnx.TrainingMode.TRAINING)")
        GraphError.__init__(self, msg, NodeRef(node), hint=hint)


def check_recurrent_folding(model: ModelProto) -> None:
    """Raise ``FoldedRecurrentError`` when an RNN/GRU/LSTM weight (W, R, B, P) is a constant folded from
    torch parameters."""
    g = model.graph
    folded = {vi.name: [n for n in folded_sources(p.value) if not GENERATED_NAME.search(n)]
              for vi in list(g.value_info) + list(g.input) for p in vi.metadata_props if p.key == FOLDED_KEY}
    inits = {t.name for t in g.initializer}
    for node in g.node:
        if node.op_type not in RECURRENT_OPS:
            continue
        for k in (1, 2, 3, 7):
            name = node.input[k] if k < len(node.input) else ""
            if name in inits and folded.get(name):
                raise FoldedRecurrentError(node, name, folded[name])


def check_supported(model: ModelProto) -> None:
    """Raise ``SubgraphOpError``/``UnsupportedOpError`` for the first node autodiff cannot take."""
    floats = {t.name for t in model.graph.initializer if t.data_type in FLOAT_ELEMS}
    for node, path in _walk(model.graph, ""):
        where = f" (inside {path})" if path else ""
        if node.op_type in SUBGRAPH_OPS and node.domain in ("", "ai.onnx"):
            reading = [(b, sorted(_outer_reads(sub) & floats)) for b, sub in sorted(_subgraphs(node), reverse=True)]
            branch, reads = next(((b, r) for b, r in reading if r), ("body", []))
            raise SubgraphOpError(node, where, branch, reads)
        if not is_claimed(node.domain, node.op_type):
            if node.domain not in ("", "ai.onnx") and not path:
                continue   # prepare_forward names the domain (training graphs are standard ONNX)
            err = UnsupportedOpError(node.op_type, NodeRef(node), domain=node.domain)
            if path:
                err.args = (f"{err.args[0]} (inside {path})",)
            raise err


def _walk(graph: GraphProto, path: str) -> Iterator[tuple[NodeProto, str]]:
    for node in graph.node:
        yield node, path
        for branch, sub in _subgraphs(node):
            label = f"{branch} of node '{NodeRef(node).name}' ({node.op_type})"
            yield from _walk(sub, f"{label}, {path}" if path else label)


def _subgraphs(node: NodeProto) -> Iterator[tuple[str, GraphProto]]:
    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            yield a.name, a.g
        elif a.type == AttributeProto.GRAPHS:
            for k, g in enumerate(a.graphs):
                yield f"{a.name}[{k}]", g


def _outer_reads(graph: GraphProto) -> set[str]:
    """Names a subgraph (and its nested subgraphs) reads from enclosing scopes."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    reads: set[str] = set()
    for node in graph.node:
        reads.update(i for i in node.input if i and i not in defined)
        for _, sub in _subgraphs(node):
            reads.update(n for n in _outer_reads(sub) if n not in defined)
        defined.update(node.output)
    return reads
