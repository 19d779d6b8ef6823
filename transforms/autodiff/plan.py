"""``ParameterPlan``: what a training graph trains and what it keeps constant, and why.

``make_plan(fwd, trainable, needed)`` turns the ``trainable`` option into the plan:

- ``"parameters"`` (default): the initializers ``parameters.choose_parameters`` calls
  parameters, less those that do not reach the loss; ties are applied first (a tied copy
  becomes a ``Transpose``/``Reshape``/``Identity`` node reading its source);
- ``"all"``: every float initializer of rank >= 1 that reaches the loss (exporter
  constants included; the behaviour before parameter detection);
- a tuple of names: exactly those (ties whose source is listed are applied).

``plan.lines()`` prints it for the CLI and the studio (long lists are elided).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import TYPE_CHECKING, Callable, Iterable

from onnx import TensorProto, helper, numpy_helper

from transforms.autodiff.sharing import report_lines

if TYPE_CHECKING:
    from transforms.autodiff.forward import Forward
    from transforms.autodiff.parameters import Tie

SHOWN = 6   # names shown per line before eliding
STATISTIC = "BatchNorm running statistic"    # parameters.choose_parameters' reason for them


@dataclass(slots=True)
class ParameterPlan:
    """``trained`` (ordered names), ``reasons`` for every float initializer, sizes, ties applied."""

    exporter: str
    trained: list[str]
    reasons: dict[str, str]
    numel: dict[str, int]
    ties: list["Tie"] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)
    shared: dict[str, list[str]] = field(default_factory=dict)   # trained names read by several modules
    statistics_updated: bool = False                              # BatchNorm running statistics are step state

    def frozen(self) -> list[str]:
        chosen = set(self.trained)
        return [n for n in self.reasons if n not in chosen and not self._updated(n)]

    def _updated(self, name: str) -> bool:
        return self.statistics_updated and self.reasons[name] == STATISTIC
    def lines(self, shown: int = SHOWN) -> list[str]:
        """A summary: the trained names, then the constant ones grouped by reason (long lists elided)."""
        values = sum(self.numel[n] for n in self.trained)
        out = [f"trains {len(self.trained)} parameters ({values:,} values; {self.exporter} export):",
               "  " + _elided([_label(n, self.reasons[n], trained=True) for n in self.trained], shown)]
        frozen = self.frozen()
        out.append(f"keeps {len(frozen)} float initializers constant:" if frozen else
                   "keeps no float initializer constant")
        groups: dict[str, list[str]] = {}
        for n in frozen:
            groups.setdefault(self.reasons[n].split(": ")[0], []).append(_label(n, self.reasons[n], trained=False))
        for key, names in groups.items():
            out.append(f"  {len(names)} {key}: {_elided(names, shown)}")
        stats = [n for n in self.reasons if self._updated(n)]
        if stats:
            out.append(f"updates {len(stats)} BatchNorm running statistics every step (PyTorch's momentum and "
                       f"unbiased variance): {_elided(stats, shown)}")
        if self.repairs:
            out.append(f"undoes {len(self.repairs)} exporter merges/removals of parameters:")
            out.append("  " + _elided(self.repairs, shown))
        if self.shared:
            out.append(f"trains {len(self.shared)} parameter(s) read by several modules as one (their gradients add):")
            out += report_lines(self.shared)
        return out


def _label(name: str, reason: str, trained: bool) -> str:
    """``name`` with the detail after ': ' in its reason (the source it was folded from or tied to)."""
    detail = reason.split(": ", 1)[1] if ": " in reason else ""
    if not detail:
        return name
    return f"{name} (= {detail})" if trained else f"{name} ({detail})"


def _elided(names: list[str], shown: int) -> str:
    if len(names) <= shown + 1:
        return ", ".join(names)
    return ", ".join(names[:shown]) + f", … ({len(names) - shown} more)"


def make_plan(fwd: "Forward", trainable: str | tuple[str, ...],
              needed: Callable[[list[str]], Iterable[str]]) -> ParameterPlan:
    """See the module docstring; ``needed(names)`` returns the names that reach the loss."""
    choice = fwd.choice
    floats = fwd.float_initializers()
    numel = {n: int(prod(fwd.initializers[n].dims)) for n in floats}
    reasons = {c.name: c.reason for c in choice.choices if c.name in numel}
    for t in choice.ties:
        reasons[t.name] = f"tied, computed from its source: {t.op} of {t.source}"
        numel[t.name] = 0
    if trainable == "all":
        ranked = [n for n in floats if len(fwd.initializers[n].dims) >= 1]
        reach = set(needed(ranked))
        trained = [n for n in ranked if n in reach]
        reasons = {n: "float initializer" if n in reach else "does not reach the loss" if n in ranked
                   else "scalar" for n in floats}
        return ParameterPlan(choice.exporter, trained, reasons, numel, repairs=list(choice.repairs))
    if trainable == "parameters":
        wanted = choice.trainable()
    else:
        wanted = list(dict.fromkeys(trainable))
        detected = set(choice.trainable())
        reasons.update({n: "not listed in trainable" for n in detected if n not in wanted})
        reasons.update({n: "listed" for n in wanted})
    if trainable == "parameters":
        reach = set(needed(wanted))
        trained = [n for n in wanted if n in reach]
        reasons.update({n: "does not reach the loss" for n in wanted if n not in reach})
    else:
        trained = wanted
    return ParameterPlan(choice.exporter, trained, reasons, numel, list(choice.ties), list(choice.repairs))


def apply_ties(fwd: "Forward", ties: list["Tie"]) -> None:
    """Replace each tied initializer by a node computing it from its source (semantics unchanged)."""
    nodes = []
    for t in ties:
        name = f"dcstudio_tie/{t.name}"
        dims = [int(d) for d in fwd.initializers[t.name].dims]
        elem = fwd.initializers[t.name].data_type
        if t.value is not None:
            fwd.initializers[t.source] = numpy_helper.from_array(t.value, t.source)
            fwd.types[t.source] = (elem, tuple(int(d) for d in t.value.shape))
        if t.op in ("Reshape", "Expand"):
            shape = f"{name}/shape"
            fwd.initializers[shape] = helper.make_tensor(shape, TensorProto.INT64, [len(dims)], dims)
            fwd.types[shape] = (TensorProto.INT64, (len(dims),))
            nodes.append(helper.make_node(t.op, [t.source, shape], [t.name], name=name))
        elif t.op == "Transpose":
            nodes.append(helper.make_node("Transpose", [t.source], [t.name], name=name, perm=list(t.perm)))
        else:
            nodes.append(helper.make_node("Identity", [t.source], [t.name], name=name))
        del fwd.initializers[t.name]
    if nodes:
        rest = list(fwd.model.graph.node)
        del fwd.model.graph.node[:]
        fwd.model.graph.node.extend(nodes + rest)
        fwd.nodes = list(fwd.model.graph.node)
