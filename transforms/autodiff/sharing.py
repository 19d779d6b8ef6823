"""Parameters read by several modules: ``shared_parameters(graph, names)`` and ``untie(model, names)``.

An initializer read from more than one module is trained as one parameter: its gradient is the
sum of every reader's. That is right for a tie the model makes (GPT-2's and Llama 3.2's
``lm_head`` is the token embedding) and wrong where an exporter merged equal tensors (the dynamo
exporter keeps one initializer for equal contents; ``exporter_repair`` undoes it for constant
values, not for equal random ones). The module of a node is the second-last of its dynamo name
scopes (``pkg.torch.onnx.name_scopes``) or its legacy name less the op (``/layers.0/mlp/Mul`` →
``layers.0.mlp``); a value is followed through views (Transpose, Reshape, …, the ties of
``parameters``) to the nodes that use it.

``untie(model, names)`` gives each module reading ``name`` a copy of its own, named
``<module>.<attribute>`` (the module the name already belongs to keeps it), so each is trained
apart: PyTorch's parameters when the exporter merged them.

``untie_statistics(model)`` does it unasked for BatchNorm running statistics: the dynamo exporter
merges an untrained BatchNorm's running variance (ones) with its weight and its running mean
(zeros) with its bias (torchvision's DenseNet: 6 of 6 BatchNorms). Trained as one tensor, the
statistic would move with the parameter, which PyTorch never does (a buffer is not a parameter),
so each BatchNorm reads a constant copy of its own (``<module>.running_mean``/``running_var``).
"""
from __future__ import annotations

import re

from onnx import GraphProto, ModelProto, NodeProto, TensorProto, helper

from transforms.autodiff.options import OptionError
from transforms.autodiff.parameters import KIND_KEY

SCOPES_KEY = "pkg.torch.onnx.name_scopes"
_VIEWS = frozenset({"Transpose", "Reshape", "Identity", "Cast", "Squeeze", "Unsqueeze", "Flatten", "Expand"})
SHOWN = 4


def module_of(node: NodeProto) -> str | None:
    """The module path of ``node`` (see the module docstring), or None when its name says nothing."""
    for p in node.metadata_props:
        if p.key == SCOPES_KEY:
            scopes = re.findall(r"'([^']*)'", p.value)
            return scopes[-2] if len(scopes) >= 2 and scopes[-2] else None
    parts = [c for c in node.name.split("/") if c][:-1]
    if not node.name.startswith("/") or not parts:
        return None
    path = ""
    for part in parts:
        path = part if not path or part.startswith(path + ".") else f"{path}.{part}"
    return path


def _readers(graph: GraphProto) -> dict[str, list[NodeProto]]:
    out: dict[str, list[NodeProto]] = {}
    for node in graph.node:
        for i in node.input:
            if i:
                out.setdefault(i, []).append(node)
    return out


def _modules(name: str, readers: dict[str, list[NodeProto]], depth: int = 0) -> list[str]:
    found: list[str] = []
    for node in readers.get(name, []):
        module = module_of(node)
        if node.op_type in _VIEWS and depth < 4 and (module is None or node.name.startswith("dcstudio_tie/")):
            found += _modules(node.output[0], readers, depth + 1)
        elif module is not None:
            found.append(module)
    return list(dict.fromkeys(found))


def shared_parameters(graph: GraphProto, names) -> dict[str, list[str]]:
    """``{name: [modules]}`` for each of ``names`` read from two modules or more."""
    readers = _readers(graph)
    found = {n: _modules(n, readers) for n in names}
    return {n: mods for n, mods in found.items() if len(mods) > 1}


def report_lines(shared: dict[str, list[str]]) -> list[str]:
    """What ``train-graph`` and the studio say about them."""
    out = []
    for name, mods in shared.items():
        shown = ", ".join(mods[:SHOWN]) + (f", … ({len(mods) - SHOWN} more)" if len(mods) > SHOWN else "")
        out.append(f"  {name}: shared by {len(mods)} modules: {shown}; if your model does not tie them, pass "
                   f"--untie {name} or re-export without initializer deduplication")
    return out


def untie(model: ModelProto, names) -> tuple[ModelProto, list[str]]:
    """A copy of ``model`` in which each module reading one of ``names`` has its own copy; notes."""
    if not names:
        return model, []
    inits = {t.name: t for t in model.graph.initializer}
    missing = [n for n in names if n not in inits]
    if missing:
        raise OptionError(f"--untie {', '.join(missing)}: not an initializer of the forward model")
    out = ModelProto()
    out.CopyFrom(model)
    readers = _readers(out.graph)
    taken = set(inits) | {o for n in out.graph.node for o in n.output}
    notes = []
    for name in names:
        mods = _modules(name, readers)
        if len(mods) < 2:
            raise OptionError(f"--untie {name}: it is read by {len(mods)} module(s) ({', '.join(mods) or 'none'}); "
                              "there is nothing to untie")
        owner, _, attr = name.rpartition(".")
        for module in mods:
            if module == owner:
                continue
            copy = _fresh(f"{module}.{attr or name}", taken)
            _add_copy(out, inits[name], copy)
            _redirect(name, copy, module, readers)
            notes.append(f"{copy}: untied from {name} (module {module})")
    return out, notes


_STATS = {3: "running_mean", 4: "running_var"}
_SAID = {"running_mean": "running mean", "running_var": "running variance"}


def untie_statistics(model: ModelProto) -> tuple[ModelProto, list[str]]:
    """A copy of ``model`` in which every BatchNorm running statistic that shares its initializer with
    another reader (a parameter, another BatchNorm) has one of its own; notes (module docstring)."""
    inits = {t.name: t for t in model.graph.initializer}
    slots: dict[str, list[tuple[NodeProto, int]]] = {}
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            if name in inits:
                slots.setdefault(name, []).append((node, k))
    merged = {name: uses for name, uses in slots.items() if len(uses) > 1
              and any(n.op_type == "BatchNormalization" and k in _STATS for n, k in uses)}
    if not merged:
        return model, []
    out = ModelProto()
    out.CopyFrom(model)
    nodes = {id(n): c for n, c in zip(model.graph.node, out.graph.node)}
    taken = set(inits) | {o for n in out.graph.node for o in n.output}
    notes = []
    for name, uses in merged.items():
        stats = [(n, k) for n, k in uses if n.op_type == "BatchNormalization" and k in _STATS]
        keep = stats[0] if len(stats) == len(uses) else None        # only statistics read it: the first keeps it
        for node, k in stats:
            if keep is not None and node is keep[0] and k == keep[1]:
                continue
            copy = _fresh(f"{module_of(node) or node.name or node.output[0]}.{_STATS[k]}", taken)
            _add_copy(out, inits[name], copy, kind="BUFFER")
            nodes[id(node)].input[k] = copy
            notes.append(f"{copy}: BatchNorm '{node.name or node.output[0]}' read its {_SAID[_STATS[k]]} "
                         f"from {name}, which {len(uses) - 1} other input(s) read too (the exporter merged equal "
                         "initializers); it reads a copy of its own")
    return out, notes


def _fresh(name: str, taken: set[str]) -> str:
    k, fresh = 0, name
    while fresh in taken:
        k += 1
        fresh = f"{name}_{k}"
    taken.add(fresh)
    return fresh


def _add_copy(model: ModelProto, tensor: TensorProto, name: str, kind: str = "PARAMETER") -> None:
    copy = TensorProto()
    copy.CopyFrom(tensor)
    copy.name = name
    model.graph.initializer.append(copy)
    vi = helper.make_tensor_value_info(name, tensor.data_type, list(tensor.dims))
    helper.set_metadata_props(vi, {KIND_KEY: kind})
    model.graph.value_info.append(vi)


def _redirect(name: str, copy: str, module: str, readers: dict[str, list[NodeProto]], depth: int = 0) -> None:
    """Make ``module``'s readers of ``name`` (through views) read ``copy`` instead."""
    for node in readers.get(name, []):
        mine = module_of(node)
        if node.op_type in _VIEWS and depth < 4 and (mine is None or node.name.startswith("dcstudio_tie/")):
            if _modules(node.output[0], readers, depth + 1) == [module]:
                node.input[list(node.input).index(name)] = copy
        elif mine == module:
            for k, i in enumerate(node.input):
                if i == name:
                    node.input[k] = copy
