"""A static fork-join schedule: independent statements run side by side on ``workers`` threads.

The program's statements form a dependency DAG (a statement depends on the one that wrote what it
reads, views and reference outputs followed to the memory they share, ``buffers._alias_groups``).
``fork_join(prog, workers)`` orders them into *steps*: a step is one statement, or up to ``workers``
independent ``kernel``/``blas`` statements (their lines are calls into buffers allocated before the
step) that the module runs concurrently with ``L.parallel`` — numba kernels and BLAS release the
GIL, and inside a step each BLAS call gets ``threads // workers`` threads, so the total never
exceeds the cores. The buffer plan treats a step as one statement (``merged``), so no two
statements of a step share a slot.

List scheduling, critical path first: among the statements whose inputs are ready, the one with
the longest remaining path (by ``cost``: a roofline estimate from ``ir.movement``, one thread's
FLOP rate and bandwidth) is placed first; the step is filled with the ready statements whose cost
is closest to it (a short partner finishes early and leaves its worker idle, so partners are
chosen by similar cost, never one that is 4× shorter unless nothing better is ready). Statements
that cannot run in a step (views, constants, reference and extern calls) keep their own step.

The schedule is data: ``Schedule.table()`` prints it (the exported module carries it as a comment
table and ``SCHEDULE``), and ``L.parallel`` can record when each member ran (the benchmark's
busy fraction per worker).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from codegen.program.program import Program, Statement
from codegen.program.shared_buffers import _raw_table
from ir.movement import kernel_estimate

PARALLEL_KINDS = frozenset({"kernel", "blas"})
FLOPS_PER_S = 90e9       # one core's sgemm rate, for ordering only (calibrated peaks are not needed)
BYTES_PER_S = 20e9       # one core's streaming bandwidth
MIN_PARTNER = 0.25       # a partner shorter than this fraction of the step's longest member is a last resort


@dataclass
class Schedule:
    workers: int
    steps: list[list[int]] = field(default_factory=list)    # statement indices, program order within a step
    cost: list[float] = field(default_factory=list)         # estimated seconds per statement

    @property
    def parallel_steps(self) -> int:
        return sum(len(s) > 1 for s in self.steps)

    def overlap(self) -> float:
        """Estimated fraction of the sequential time hidden by running steps' members side by side."""
        total = sum(self.cost)
        step_time = sum(max(self.cost[k] for k in s) for s in self.steps)
        return 1.0 - step_time / total if total else 0.0

    def table(self, statements: list[Statement]) -> list[str]:
        """``#`` lines: each parallel step, its members and their estimated milliseconds."""
        lines = [f"# Schedule: {len(self.steps)} steps for {len(statements)} statements on {self.workers} workers; "
                 f"{self.parallel_steps} steps run statements side by side (estimated {self.overlap():.0%} of the "
                 "sequential time hidden)."]
        for n, step in enumerate(self.steps):
            if len(step) > 1:
                members = "; ".join(f"{statements[k].node_id} {self.cost[k] * 1e3:.2f} ms" for k in step)
                lines.append(f"#   step {n}: {members}")
        return lines


def statement_cost(prog: Program, st: Statement) -> float:
    """Seconds one core needs for ``st`` (roofline of the node's FLOPs and bytes; 0 for views)."""
    if st.kind in ("view", "constant"):
        return 0.0
    node = prog.graph.nodes.get(st.node_id)
    if node is None:
        return 0.0
    est = kernel_estimate(prog.graph, node)
    return max(est.flops / FLOPS_PER_S, est.bytes / BYTES_PER_S)


def dependencies(statements: list[Statement], recorded: dict[str, list[str]] | None = None) -> list[set[int]]:
    """Per statement, the earlier statements it must follow: the writers of what it reads and
    the readers and writers of what it writes. Memory shared through views and reference outputs
    counts as one, and so does every recorded ``memory_reuse`` buffer (``recorded``: name ->
    members), so a statement writing in place never runs beside a reader of what it overwrites."""
    from codegen.program.buffers import _alias_groups
    groups = _alias_groups(statements)
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
    """The steps of ``prog`` (see the module docstring); one statement per step when ``workers`` is 1."""
    statements = prog.statements
    cost = [statement_cost(prog, st) for st in statements]
    sched = Schedule(max(1, int(workers)), cost=cost)
    deps = dependencies(statements, _raw_table(prog.graph))
    users: list[list[int]] = [[] for _ in statements]
    for k, ds in enumerate(deps):
        for d in ds:
            users[d].append(k)
    path = [0.0] * len(statements)                   # longest cost path from a statement to the end
    for k in reversed(range(len(statements))):
        path[k] = cost[k] + max((path[u] for u in users[k]), default=0.0)
    waiting = [len(ds) for ds in deps]
    ready = {k for k, n in enumerate(waiting) if n == 0}
    while ready:
        first = max(ready, key=lambda k: (path[k], -k))
        step = [first]
        if sched.workers > 1 and _pairable(statements[first], cost[first], sched.workers):
            step += _partners(first, ready, statements, cost, sched.workers - 1)
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


def _partners(first: int, ready: set[int], statements: list[Statement], cost: list[float], n: int) -> list[int]:
    """Up to ``n`` ready statements to run beside ``first``: similar cost first."""
    candidates = [k for k in ready if k != first and _pairable(statements[k], cost[k], n + 1)]
    good = [k for k in candidates if cost[k] >= MIN_PARTNER * cost[first]]
    pool = good or candidates
    pool.sort(key=lambda k: (abs(cost[k] - cost[first]), k))
    return pool[:n]


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


def _pairable(st: Statement, cost: float, workers: int) -> bool:
    """A statement that may share a step: a call into planned buffers, not already as wide as
    the workers (a grouped GEMM runs its members side by side itself)."""
    return st.kind in PARALLEL_KINDS and cost > 0 and len(st.tasks) < workers


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
