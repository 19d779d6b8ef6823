"""A hypothesis state machine: random applicable transformations, undo, redo and revert.

Invariants: undo-all restores the original graph hash; redo-all reproduces the forward
hash; the reference executor's outputs stay equal to the original's throughout; the live
figures always equal a full recount.
"""
from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from codegen.numpy_ref.executor import run
from codegen.numpy_ref.feeds import compare, feeds_for
from ir.movement import report
from ir.serialize import graph_hash
from studio.session import Session
from tests.conftest import FIXTURES

GRAPHS = ["ort_artifacts/mlp/legacy/training_model.onnx", "joint_standard/mlp_joint_adamw.onnx",
          "ort_artifacts/bert_layer_small/legacy_ln3/gradient_model.onnx"]


class SessionMachine(RuleBasedStateMachine):
    @initialize(which=st.sampled_from(GRAPHS))
    def open(self, which):
        self.s = Session.open(FIXTURES / which, autosave=False)
        self.feeds = feeds_for(self.s.graph)
        self.reference = run(self.s.graph, self.feeds)
        self.hashes = [graph_hash(self.s.graph)]      # hash after k applied steps
        self.rtol = 1e-4                              # widened by lossy steps (mixed_precision)

    @rule(data=st.data())
    def apply_random(self, data):
        cands = [(t, m) for t, m in self.s.candidates() if t.check(self.s.graph, m).ok]
        if not cands:
            return
        t, m = data.draw(st.sampled_from(cands[:60]), label="match")
        self.s.apply(t.name, m.anchors, t.params())
        self.rtol = max(self.rtol, t.tolerance)
        del self.hashes[self.s.cursor:]
        self.hashes.append(graph_hash(self.s.graph))

    @precondition(lambda self: self.s.can_undo())
    @rule()
    def undo(self):
        self.s.undo()

    @precondition(lambda self: self.s.can_redo())
    @rule()
    def redo(self):
        self.s.redo()

    @rule(data=st.data())
    def revert(self, data):
        self.s.revert_to(data.draw(st.integers(0, len(self.s.steps)), label="k"))

    @invariant()
    def hash_matches_position(self):
        assert graph_hash(self.s.graph) == self.hashes[self.s.cursor]

    @invariant()
    def figures_equal_recount(self):
        assert self.s.metrics().bytes == report(self.s.graph).total.bytes

    def teardown(self):
        if not hasattr(self, "s"):
            return
        assert not compare(self.reference, run(self.s.graph, self.feeds), self.rtol)
        self.s.revert_to(len(self.s.steps))
        assert graph_hash(self.s.graph) == self.hashes[-1]          # redo-all: the forward hash
        assert not compare(self.reference, run(self.s.graph, self.feeds), self.rtol)
        while self.s.can_undo():
            self.s.undo()
        assert graph_hash(self.s.graph) == self.hashes[0]           # undo-all: the original


SessionMachine.TestCase.settings = settings(max_examples=12, stateful_step_count=10, deadline=None,
                                            suppress_health_check=[HealthCheck.too_slow])
TestSessionMachine = SessionMachine.TestCase
