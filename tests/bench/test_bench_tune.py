"""Benchmark (on demand: ``bash .ci/test tests/bench -k tune -s``): ``dcstudio tune`` against the hand recipe.

- the BERT-base layer step (the bundled example), objective bytes, ``$DCSTUDIO_TUNE_BUDGET``
  evaluations (default 800) on the embedded Dask LocalCluster (2 workers): bytes reached, the
  recipe's bytes, evaluations per second, then a warm start from the same database (how many
  evaluations it runs again: none is the aim) and the same history;
- the 12-layer BERT and EfficientNet-B0 training steps of the scale benchmark (transfer tuning
  across equal layers), a small budget each (``$DCSTUDIO_TUNE_BUDGET_LARGE``, default 16): the
  bytes reached against the recipe's, seconds per evaluation.

Reported, not asserted beyond "never worse than the recipe" (the recipe is in the population).
"""
from __future__ import annotations

import os
import time

import pytest

from studio.tune.evaluators import DaskEvaluator
from studio.tune.types import ModelRef
from studio.tune.search import search
from studio.tune.database import ResultsDB
from tests.bench.scale_models import bert_stack, efficientnet_b0

pytestmark = pytest.mark.bench
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "resources", "examples", "bert_layer_base_train.onnx")


def _run(path, budget: int, db: ResultsDB, seed: int = 0):
    ev = DaskEvaluator(workers=2)
    t = time.perf_counter()
    try:
        res = search(ModelRef(str(path)), evaluator=ev, db=db, budget=budget, seed=seed, batch=16, beam=12)
    finally:
        ev.close()
    return res, time.perf_counter() - t


def test_tune_bert_layer_bytes(tmp_path):
    budget = int(os.environ.get("DCSTUDIO_TUNE_BUDGET", "800"))
    db = ResultsDB(tmp_path / "tune.sqlite")
    res, secs = _run(EXAMPLE, budget, db)
    print(f"\nBERT-base layer, objective bytes, budget {budget}, 2 Dask workers: {res.score.bytes / 1e6:.2f} MB "
          f"against the recipe's {res.baseline.bytes / 1e6:.2f} MB ({res.score.bytes / res.baseline.bytes - 1:+.1%}) "
          f"in {secs:.0f} s ({res.progress.evaluated / secs:.1f} evaluations/s); "
          f"{len(res.best.passes)} passes: {', '.join(p.transformation for p in res.best.passes)}")
    again, secs2 = _run(EXAMPLE, budget, db)
    print(f"  warm start: {again.progress.evaluated} evaluated again, {again.progress.reused} read from the database, "
          f"{secs2:.1f} s; same history: {again.best.key == res.best.key}")
    assert res.score.bytes <= res.baseline.bytes and again.best.key == res.best.key


@pytest.mark.parametrize("build", [lambda: bert_stack(12), efficientnet_b0], ids=["bert12", "efficientnet_b0"])
def test_tune_whole_models_with_transfer(build, tmp_path):
    budget = int(os.environ.get("DCSTUDIO_TUNE_BUDGET_LARGE", "16"))
    res, secs = _run(build(), budget, ResultsDB(tmp_path / "tune.sqlite"))
    print(f"\n{build().name}: transfer {res.transfer}, budget {budget}: {res.score.bytes / 1e6:.1f} MB against the "
          f"recipe's {res.baseline.bytes / 1e6:.1f} MB ({res.score.bytes / res.baseline.bytes - 1:+.1%}), "
          f"{secs:.0f} s ({secs / max(res.progress.evaluated, 1):.1f} s per evaluation on 2 workers)")
    assert res.score.bytes <= res.baseline.bytes
