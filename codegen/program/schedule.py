"""A static fork-join schedule: independent statements run side by side on ``workers`` threads.

The program's statements form a dependency DAG (a statement depends on the one that wrote what it
reads, views and reference outputs followed to the memory they share, ``aliases.alias_groups``).
``fork_join(prog, workers)`` orders them into *steps*: a step is one statement, or up to ``workers``
independent ``kernel``/``blas`` statements (their lines are calls into buffers allocated before the
step) that the module runs concurrently with ``L.parallel`` — numba kernels and BLAS release the
GIL, and inside a step each BLAS call gets ``threads // workers`` threads, so the total never
exceeds the cores. The buffer plan treats a step as one statement (``merged``), so no two
statements of a step share a slot.

List scheduling, critical path first: among the statements whose inputs are ready, the one with
the longest remaining path (by ``cost``: a roofline estimate from ``ir.movement`` at one thread's
FLOP rate and bandwidth) is placed first, and a ready partner joins its step only where the model
says the pair is faster side by side than one after the other on all threads. The model: BLAS
scales with threads (``BLAS_SPEEDUP`` on two: a 1024×3072×768 sgemm took 97 ms on one thread,
49 ms on two, and two of them side by side on one thread each 52 ms), a numba loop nest without
``prange`` does not; a step costs ``OVERHEAD`` to fork, and must save ``MIN_GAIN`` of its in-order
time (the costs are estimates). So two kernels pair freely, a GEMM pairs with a kernel only of
similar length (else it would run on half the threads for longer than the kernel saves), and a
grouped GEMM runs its members side by side (``split``) only where BLAS scales worse than that. Statements that cannot run in a step (views, constants,
reference and extern calls) keep their own step.

The schedule is data: ``Schedule.table()`` prints it (the exported module carries it as a comment
table and ``SCHEDULE``), and ``L.parallel`` can record when each member ran (the benchmark's
busy fraction per worker).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from codegen.program.program import Program, Statement
from codegen.program.shared_buffers import _raw_table
from ir.movement import kernel_estimate
from ir.statements import FREE_KINDS, StatementKind

PARALLEL_KINDS = frozenset({StatementKind.KERNEL, StatementKind.BLAS})
FLOPS_PER_S = 90e9       # one core's sgemm rate, for ordering only (calibrated peaks are not needed)
BYTES_PER_S = 20e9       # one core's streaming bandwidth
BLAS_SPEEDUP = 1.95      # a large BLAS call on two threads against one (1024x3072x768 sgemm here: 1.97)
OVERHEAD = 2e-4          # seconds to fork and join a step (a pool round trip and two BLAS thread switches)
MIN_GAIN = 0.10          # a step must save this share of its in-order time: the model is rough


@dataclass
class Schedule:
    workers: int
    steps: list[list[int]] = field(default_factory=list)    # statement indices, program order within a step
    cost: list[float] = field(default_factory=list)         # estimated seconds per statement, one thread
    speedup: list[float] = field(default_factory=list)      # on all workers' threads against one
    split: set[int] = field(default_factory=set)            # grouped statements whose members run side by side
    member_time: dict[int, float] = field(default_factory=dict)   # split statement -> its longest member
    wide: set[int] = field(default_factory=set)             # statements that use every thread themselves (prange)

    @property
    def parallel_steps(self) -> int:
        return sum(len(s) > 1 for s in self.steps)

    def overlap(self) -> float:
        """Estimated fraction of the in-order time (every statement on all threads) the steps save."""
        alone = [c / s for c, s in zip(self.cost, self.speedup)]
        timed = 0.0
        for step in self.steps:
            if len(step) > 1:
                timed += max(self.cost[k] for k in step)
            else:
                timed += self.member_time.get(step[0], alone[step[0]])
        total = sum(alone)
        return max(0.0, 1.0 - timed / total) if total and self.parallel_steps + len(self.split) else 0.0

    def table(self, statements: list[Statement]) -> list[str]:
        """``#`` lines: each step that runs work side by side, with estimated one-thread milliseconds."""
        lines = [f"# Schedule: {len(self.steps)} steps for {len(statements)} statements on {self.workers} workers; "
                 f"{self.parallel_steps} steps pair statements and {len(self.split)} grouped GEMMs run their "
                 f"members side by side (estimated {self.overlap():.0%} faster than in order)."]
        for n, step in enumerate(self.steps):
            if len(step) > 1 or step[0] in self.split:
                what = "members side by side" if len(step) == 1 else "side by side"
                members = "; ".join(f"{statements[k].node_id} {self.cost[k] * 1e3:.2f} ms" for k in step)
                lines.append(f"#   step {n} ({what}): {members}")
        return lines


def statement_cost(prog: Program, st: Statement) -> float:
    """Seconds one core needs for ``st`` (roofline of the node's FLOPs and bytes; 0 for views)."""
    if st.kind in FREE_KINDS:
        return 0.0
    node = prog.graph.nodes.get(st.node_id)
    return _roofline(prog, node) if node is not None else 0.0


def _roofline(prog: Program, node) -> float:
    est = kernel_estimate(prog.graph, node)
    return max(est.flops / FLOPS_PER_S, est.bytes / BYTES_PER_S)


def _speedup(st: Statement, workers: int) -> float:
    """How much faster ``st`` runs on ``workers`` threads than on one: BLAS calls (a contraction,
    with or without an epilogue kernel) scale, loop nests without ``prange`` do not."""
    if workers > 1 and (st.kind == StatementKind.BLAS or (st.kind == StatementKind.KERNEL and st.lines and not st.lines[0].startswith("K."))):
        return BLAS_SPEEDUP
    return 1.0


def _member_costs(prog: Program, st: Statement) -> list[float]:
    """One-thread seconds of each member of a grouped GEMM statement (its FLOPs: GEMMs are compute-bound)."""
    from ir import flops, fused_ops
    node = prog.graph.nodes.get(st.node_id)
    if node is None or not fused_ops.is_group(node):
        return []
    return [flops.fused_flops(prog.graph, m) / FLOPS_PER_S for m in fused_ops.members(node)]   # compute-bound


def dependencies(statements: list[Statement], recorded: dict[str, list[str]] | None = None) -> list[set[int]]:
    """Per statement, the earlier statements it must follow: the writers of what it reads and
    the readers and writers of what it writes. Memory shared through views and reference outputs
    counts as one, and so does every recorded ``memory_reuse`` buffer (``recorded``: name ->
    members), so a statement writing in place never runs beside a reader of what it overwrites."""
    from codegen.program.aliases import alias_groups
    groups = alias_groups(statements)
    for members in (recorded or {}).values():
        for other in members[1:]:
            groups.union(other, members[0])
    writers: dict[str, list[int]] = {}
    readers: dict[str, list[int]] = {}
    deps: list[set[int]] = []
    for k, st in enumerate(statements):
        mine: set[int] = set()
        for c in st.reads:
            mine.update(writers.get(groups.find(c), ()))
        for c in st.writes:
            root = groups.find(c)
            mine.update(writers.get(root, ()))
            mine.update(readers.get(root, ()))
        for c in st.reads:
            readers.setdefault(groups.find(c), []).append(k)
        for c in st.writes:
            writers.setdefault(groups.find(c), []).append(k)
        mine.discard(k)
        deps.append(mine)
    return deps


def fork_join(prog: Program, workers: int = 2) -> Schedule:
    """The steps of ``prog`` (see the module docstring); with one worker, each statement in program order."""
    statements = prog.statements
    n = max(1, int(workers))
    sched = Schedule(n, cost=[statement_cost(prog, st) for st in statements],
                     speedup=[_speedup(st, n) for st in statements])
    cost = sched.cost
    for k, st in enumerate(statements):             # a prange kernel already uses every thread: alone
        if any(callee.startswith("K.") and prog.kernels[callee[2:]].parallel for callee, _ in st.calls):
            sched.wide.add(k)
    if n == 1:                                        # nothing runs side by side: keep the program's order
        sched.steps = [[k] for k in range(len(statements))]
        return sched
    for k, st in enumerate(statements):
        members = _member_costs(prog, st) if len(st.tasks) > 1 and k not in sched.wide else []
        in_order = sum(members) / sched.speedup[k]
        if members and len(members) <= n and in_order - max(members) - OVERHEAD > MIN_GAIN * in_order:
            sched.split.add(k)
            sched.member_time[k] = max(members)
    deps = dependencies(statements, _raw_table(prog.graph))
    users: list[list[int]] = [[] for _ in statements]
    for k, ds in enumerate(deps):
        for d in ds:
            users[d].append(k)
    path = [0.0] * len(statements)                   # longest cost path from a statement to the end
    for k in reversed(range(len(statements))):
        path[k] = cost[k] + max((path[u] for u in users[k]), default=0.0)
    waiting = [len(ds) for ds in deps]
    ready = {k for k, w in enumerate(waiting) if w == 0}
    while ready:
        first = max(ready, key=lambda k: (path[k], -k))
        step = [first]
        if first not in sched.split and first not in sched.wide and _pairable(statements[first], cost[first]):
            partner = _partner(first, ready, statements, sched)
            if partner is not None:
                step.append(partner)
        step.sort()
        sched.steps.append(step)
        for k in step:
            ready.discard(k)
        for k in step:
            for u in users[k]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    ready.add(u)
    if sum(map(len, sched.steps)) != len(statements):
        raise AssertionError("the schedule lost statements (a dependency cycle?)")
    return sched


def _gain(a: int, b: int, sched: Schedule) -> float:
    """Seconds saved by running ``a`` and ``b`` side by side (one thread each) instead of one after
    the other on all threads."""
    c, s = sched.cost, sched.speedup
    in_order = c[a] / s[a] + c[b] / s[b]
    saved = in_order - max(c[a], c[b]) - OVERHEAD
    return saved if saved > MIN_GAIN * in_order else 0.0


def _partner(first: int, ready: set[int], statements: list[Statement], sched: Schedule) -> int | None:
    """The ready statement that gains most beside ``first``, if any gains."""
    best, gain = None, 0.0
    for k in sorted(ready):
        if k != first and k not in sched.split | sched.wide and _pairable(statements[k], sched.cost[k]):
            g = _gain(first, k, sched)
            if g > gain:
                best, gain = k, g
    return best


def units(statements: list[Statement], sched: Schedule | None, keep: list[Statement] | None = None
          ) -> list[list[Statement]]:
    """The steps as lists of statements (each statement alone without a schedule); ``keep``
    restricts them to a subset (``_forward``: the statements the loss needs), in step order."""
    steps = sched.steps if sched is not None else [[k] for k in range(len(statements))]
    wanted = None if keep is None else {id(st) for st in keep}
    out = []
    for step in steps:
        members = [statements[k] for k in step if wanted is None or id(statements[k]) in wanted]
        if members:
            out.append(members)
    return out


def _pairable(st: Statement, cost: float) -> bool:
    """A statement that may share a step: a call into planned buffers that takes time."""
    return st.kind in PARALLEL_KINDS and cost > 0


def merged(steps: list[list[Statement]]) -> list[Statement]:
    """One pseudo-statement per step (reads, writes and allocations of its members): what the
    buffer planner and the frees see, so members of a step never share a slot."""
    out = []
    for members in steps:
        if len(members) == 1:
            out.append(members[0])
            continue
        out.append(Statement(members[0].node_id, "step", "step", "",
                             [], tuple(c for m in members for c in m.reads),
                             tuple(c for m in members for c in m.writes),
                             tuple(a for m in members for a in m.allocs)))
    return out
