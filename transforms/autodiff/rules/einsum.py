"""The gradient rule of ``Einsum`` (explicit or implicit output; no ellipsis, no repeated index
within one operand).

For operand ``A`` with subscripts ``a``: ``dA = einsum("<out>,<others>-><a'>", dy, others…)``
where ``a'`` keeps the indices of ``a`` that occur in the output or another operand; an index
summed inside ``A`` alone is restored by ``Expand`` (every element got the same gradient).
"""
from __future__ import annotations

from collections import Counter

from transforms.autodiff.emitter import Emitter
from transforms.autodiff.registry import GradRequest, Grads, NoGradientError, gradient


def parse(equation: str) -> tuple[list[str], str]:
    """(input subscripts, output subscripts) of an equation without spaces or ellipses."""
    eq = equation.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    ins = lhs.split(",")
    if "->" not in eq:
        counts = Counter("".join(ins))
        rhs = "".join(sorted(c for c, n in counts.items() if n == 1))
    return ins, rhs


@gradient("Einsum")
def einsum(em: Emitter, req: GradRequest) -> Grads:
    equation = req.attrs["equation"]
    equation = equation.decode() if isinstance(equation, bytes) else equation
    ins, out = parse(equation)
    if "." in equation or any(len(set(s)) != len(s) for s in ins + [out]):
        raise NoGradientError(req.node, variant=f"with equation '{equation}' (ellipsis or a repeated index)",
                              hint="Write the contraction without '...' and without diagonals")
    grads = []
    for i, sub in enumerate(ins):
        if not req.want(i):
            grads.append(None)
            continue
        others = [(s, n) for j, (s, n) in enumerate(zip(ins, req.node.input)) if j != i]
        seen = set(out).union(*[set(s) for s, _ in others])
        kept = "".join(c for c in sub if c in seen)
        eq = ",".join([out] + [s for s, _ in others]) + "->" + kept
        g = em.op("Einsum", req.dy(), *[n for _, n in others], equation=eq)
        shape = em.shape(req.node.input[i])
        if kept != sub:
            g = em.reshape(g, [d if c in seen else 1 for c, d in zip(sub, shape)])
            g = em.op("Expand", g, em.ints(shape))
        grads.append(g)
    return grads
