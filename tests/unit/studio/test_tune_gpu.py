"""``dcstudio tune --backend cuda`` (``studio.tune.gpu``): finalists timed as CUDA packages on a GPU.

Here (no GPU) the parts that need none run for real: both packages exported with one oracle of the
original model, the CLI's refusals before any search, the database contexts, the choice when a
finalist fails its check on the device. The measurement itself runs where a CUDA device is present
(a lent GPU runs this file) and skips elsewhere, saying why.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from codegen.cupy_cuda.ab import main as child_main
from codegen.cupy_cuda.profile import device_reason
from codegen.timing.stats import pair_spread
from studio.cli import main
from studio.session.recipe import SUBSTATION, Pass
from studio.tune.types import Candidate, Measured, ModelRef, Progress, TuneResult
from studio.tune.search import context_key
from studio.tune.types import Score
from studio.tune.gpu import CANDIDATE, RECIPE, export_pair, gpu_peaks, measure_pair_cuda

NO_GPU = device_reason()
FUSE = Candidate.of([Pass("expand"), Pass("map_fusion")])


@pytest.fixture
def model(fixtures_dir) -> ModelRef:
    return ModelRef(str(fixtures_dir / "joint_standard" / "mlp_joint_adamw.onnx"))


def test_both_packages_are_checked_against_one_oracle_of_the_original(model, tmp_path):
    a, b = export_pair(model, Candidate.of(SUBSTATION), FUSE, False, tmp_path)
    assert (a, b) == (tmp_path / RECIPE, tmp_path / CANDIDATE)
    with np.load(a / "check.npz") as fa, np.load(b / "check.npz") as fb:
        about = str(fa["about"])
        assert about == str(fb["about"]) and "stands for the original" not in about
        outs = sorted(k for k in fa.files if k.startswith("out_"))
        assert outs and outs == sorted(k for k in fb.files if k.startswith("out_"))
        for k in outs:                             # the same truth: one oracle, not one per graph
            np.testing.assert_array_equal(fa[k], fb[k])
    for pkg in (a, b):
        assert "import cupy" in (pkg / "_lib.py").read_text(encoding="utf-8")
    kernels = [sorted(p.name for p in (pkg / "kernels").glob("k_*.py")) for pkg in (a, b)]
    assert kernels[0] != kernels[1]                # two different programs


def test_every_finalist_reuses_one_recipe_package_and_oracle(fixtures_dir, tmp_path, monkeypatch):
    """The recipe's package and the oracle are made once per process (``recipe_package``); a changed
    model file, baseline or transfer makes them again and deletes the old folder; a failed export
    leaves none behind."""
    import shutil
    import tempfile
    import onnx
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))        # where the cached folders go
    src = fixtures_dir / "joint_standard" / "mlp_joint_adamw.onnx"
    model = ModelRef(str(shutil.copy(src, tmp_path / "mlp.onnx")))
    works = [tmp_path / f"w{k}" for k in range(4)]
    for w in works:
        w.mkdir()
    base = Candidate.of(SUBSTATION)
    a1, b1 = export_pair(model, base, FUSE, False, works[0])
    made = a1.resolve()
    assert made.parent.parent == tmp_path and made != a1
    stamp = {p.name: p.stat().st_mtime_ns for p in made.iterdir() if p.is_file()}
    a2, b2 = export_pair(model, base, Candidate.of([Pass("expand")]), False, works[1])
    assert a2.resolve() == made                                 # not exported again
    assert {p.name: p.stat().st_mtime_ns for p in made.iterdir() if p.is_file()} == stamp
    with np.load(made / "check.npz") as fa, np.load(b1 / "check.npz") as f1, np.load(b2 / "check.npz") as f2:
        outs = sorted(k for k in fa.files if k.startswith("out_"))
        assert outs
        for k in outs:                                          # one truth for every finalist
            np.testing.assert_array_equal(fa[k], f1[k])
            np.testing.assert_array_equal(fa[k], f2[k])
    shutil.rmtree(works[0])                                     # a finished pair's folder: the link only
    assert made.is_dir()
    st = os.stat(model.path)
    os.utime(model.path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))   # the user saved the model again
    a3, _ = export_pair(model, base, FUSE, False, works[2])
    assert a3.resolve() != made and not made.parent.exists()    # made again, the old one deleted
    onnx.save(onnx.ModelProto(), model.path)                    # now the file is no model at all
    with pytest.raises(Exception):
        export_pair(model, base, FUSE, False, works[3])
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("dcstudio-tune-recipe-"))
    assert left == [], left                                      # the failed one left nothing, the old was replaced


def test_cli_refuses_what_it_cannot_honour_before_searching(model, tmp_path, capsys):
    out = tmp_path / "h.json"
    args = ["tune", model.path, "-o", str(out), "--no-db", "--workers", "1", "--budget", "2", "--backend", "cuda"]
    assert main(args + ["--cutouts", "2"]) == 2
    assert "--cutouts times CPU kernels" in capsys.readouterr().err
    assert main(args + ["--measure", "0"]) == 2
    assert "--measure 0 times nothing on the GPU" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.skipif(NO_GPU is None, reason="a CUDA device is present: this checks the message where there is none")
@pytest.mark.parametrize("workers", ["1", "2"])      # 2: asked on a Dask worker, where the steps would run
def test_cli_without_a_device_says_why_and_writes_nothing(model, tmp_path, capsys, workers):
    out = tmp_path / "h.json"
    assert main(["tune", model.path, "-o", str(out), "--no-db", "--workers", workers, "--backend", "cuda"]) == 2
    err = capsys.readouterr().err
    assert NO_GPU in err and "leave --backend out" in err
    assert ("LocalCluster" in err) == (workers == "2")
    assert not out.exists()


def test_gpu_results_live_in_their_own_database_context(model):
    sha = "0" * 64
    cpu, about = context_key(sha, model, "bytes", False, None)
    assert "backend" not in about                  # CPU keys are the ones earlier databases hold
    assert context_key(sha, model, "bytes", False, None, "cpu")[0] == cpu
    cuda, about = context_key(sha, model, "bytes", False, None, "cuda")
    assert cuda != cpu and about["backend"] == "cuda"


def test_a_finalist_that_fails_on_the_gpu_is_never_chosen():
    base, other = Candidate.of(SUBSTATION), FUSE
    score = Score(1.0, 1, 1, "h", 0.1)
    res = TuneResult(other, score, score, Progress(), False, "c", False, [(other, score), (base, score)],
                     baseline_candidate=base)
    res.measured = [Measured(other.key, 2.0, float("inf"), 0.0, 0.0, 0, "GPU", "its check failed")]
    assert res.chosen.key == base.key
    res.measured = [Measured(other.key, 2.0, 1.0, 2.0, 0.01, 0, "GPU")]
    assert res.chosen.key == other.key


def test_a_failed_finalist_stays_left_out_when_read_back(tmp_path):
    from studio.tune.database import ResultsDB
    db = ResultsDB(tmp_path / "tune.sqlite")
    db.put_measured("ctx", Measured("bad", 2.0, float("inf"), 0.0, 0.0, 0, "GPU", "its check failed"))
    db.put_measured("ctx", Measured("good", 2.0, 1.0, 2.0, 0.01, 0, "GPU"))
    bad, good = db.get_measured("ctx", "bad"), db.get_measured("ctx", "good")
    db.close()
    assert bad.ratio == 0.0 and bad.candidate_ms == float("inf") and "failed its check" in bad.note
    assert good.ratio == 2.0 and good.note == ""


def test_pair_spread_and_the_child_usage():
    assert pair_spread([2.0, 4.0], [1.0, 1.0]) == pytest.approx(2.0 / 3.0)
    assert pair_spread([], []) == 0.0
    assert child_main(["nonsense"]) == 2


@pytest.mark.skipif(NO_GPU is not None, reason=f"needs a CUDA device: {NO_GPU}")
def test_finalists_timed_on_the_gpu(model):
    m = measure_pair_cuda(model, Candidate.of(SUBSTATION), FUSE, False, reps=4)
    assert m.note == "" and m.device
    assert m.recipe_ms > 0 and m.candidate_ms > 0 and m.ratio == pytest.approx(m.recipe_ms / m.candidate_ms)
    peaks = gpu_peaks()
    assert peaks.bandwidth > 1e11 and peaks.flops > 1e12 and peaks.fingerprint.startswith("cuda:")
