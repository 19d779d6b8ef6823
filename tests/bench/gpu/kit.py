"""Build the kit a lent GPU runs (``python -m tests.bench.gpu.kit [DIR]``, default ``.gpu``).

The device machine gets the working tree and at most 64 MiB in all, so model weights do not
travel: every case is a *skeleton* ONNX (each initializer over ``KEEP`` elements removed and
described in ``<case>.fill.json`` by dtype, shape, mean and standard deviation) plus the recipe's
history (``<case>.history.json``, recorded here, where the recipe's CPU work is cheap). There,
``lease.py`` puts weights of the same shape and scale back (constants exactly, floats from a
seeded normal draw), so the package is checked against the *rebuilt* original model: same
structure, same operators, same scales — not the same numbers.

Cases: every fixture training graph (``tests/fixtures``) as imported and after the recipe, every
model of the zoo (``tests/zoo``) after the recipe, and the BERT-base layer training step of
``tests/bench/test_bench_codegen_bert.py`` after the recipe (the step timed against PyTorch), and
after the recipe and ``view_alias`` (``bert_base_layer_aliased``).
``cases.json`` lists them.
"""
from __future__ import annotations

import hashlib
import json
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from studio.cli import main as cli

REPO = Path(__file__).resolve().parents[3]
FIX = REPO / "tests" / "fixtures"
KEEP = 4096
WORK = Path("/tmp/dcstudio-kit-work")


def skeleton(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    """(the model without its large initializers, how to rebuild them)."""
    fill, kept = {}, []
    for init in model.graph.initializer:
        arr = numpy_helper.to_array(init)
        if arr.size <= KEEP or arr.dtype.kind != "f":     # indices and small constants travel as they are
            kept.append(init)
            continue
        wide = arr.astype(np.float64)
        const = bool((arr == arr.flat[0]).all())
        fill[init.name] = {"dtype": str(arr.dtype), "shape": list(arr.shape), "const": const,
                           "value": float(wide.flat[0]), "mean": float(wide.mean()), "std": float(wide.std()),
                           "index": len(kept) + len(fill)}
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    return model, fill


def rebuild(kit: Path, row: dict, work: Path) -> Path:
    """The case's model with weights of the same shapes and scales put back: constants exactly,
    floats from a normal draw seeded by the initializer's name (so here and there agree, and the
    history recorded here on the rebuilt model replays there: same file, same sha256)."""
    model = onnx.load(str(kit / row["model"]))
    fill = json.loads((kit / row["fill"]).read_text())
    inits = list(model.graph.initializer)
    for name, f in sorted(fill.items(), key=lambda kv: kv[1]["index"]):
        dtype = np.dtype(f["dtype"])
        if f["const"]:
            arr = np.full(f["shape"], f["value"], dtype)
        else:
            rng = np.random.default_rng(zlib.crc32(name.encode()))
            arr = (rng.standard_normal(f["shape"]) * f["std"] + f["mean"]).astype(dtype)
        inits.insert(f["index"], numpy_helper.from_array(arr, name))
    del model.graph.initializer[:]
    model.graph.initializer.extend(inits)
    path = work / f"{row['case']}.onnx"
    onnx.save(model, str(path))
    return path


def _save_case(out: Path, case: str, source: onnx.ModelProto | Path, recipe: bool, rows: list) -> None:
    """Skeleton and fill of ``source``; with ``recipe``, the recipe recorded on the rebuilt model."""
    model = onnx.load(str(source)) if isinstance(source, Path) else source
    skel, fill = skeleton(model)
    onnx.save(skel, out / f"{case}.skel.onnx")
    (out / f"{case}.fill.json").write_text(json.dumps(fill), encoding="utf-8")
    row = {"case": case, "model": f"{case}.skel.onnx", "fill": f"{case}.fill.json", "history": None}
    if recipe:
        rebuilt = rebuild(out, row, WORK)
        hist = _recipe(rebuilt, out, case)
        if hist is None:
            return
        row["history"] = hist.name
    row["sha256"] = hashlib.sha256(rebuild(out, row, WORK).read_bytes()).hexdigest()
    rows.append(row)


def _recipe(model: Path, work: Path, case: str) -> Path | None:
    hist = work / f"{case}.history.json"
    t = time.perf_counter()
    code = cli(["recipe", str(model), "-o", str(hist), "--quiet"])
    print(f"  recipe {case}: exit {code}, {time.perf_counter() - t:.1f} s", flush=True)
    return hist if code == 0 else None


def _aliased(out: Path, rows: list) -> None:
    """The BERT-base case again, its recipe followed by ``view_alias`` at every match (a view op run as
    an alias of its input, as ``tune`` may choose): the CUDA export of a history that holds it."""
    from studio.session import Session
    base = next(r for r in rows if r["case"] == "bert_base_layer_recipe")
    s = Session.open(rebuild(out, base, WORK))
    s.load_history(out / base["history"])
    if s.apply_pass("view_alias") is None:
        print("  view_alias applies nowhere after the recipe: no aliased case", flush=True)
        return
    hist = out / "bert_base_layer_aliased.history.json"
    s.save_history(hist)
    rows.append(base | {"case": "bert_base_layer_aliased", "history": hist.name})


def fixture_cases() -> list[tuple[str, Path]]:
    cases = [(f"fix_{p.stem}", p) for p in sorted((FIX / "joint_standard").glob("*.onnx"))]
    for sub in ("mlp/legacy", "tiny_resnet/legacy", "bert_layer_small/legacy_ln3"):
        for artifact in ("training_model", "train_step_adamw"):
            p = FIX / "ort_artifacts" / sub / f"{artifact}.onnx"
            if p.exists():
                cases.append((f"ort_{sub.split('/')[0]}_{artifact}", p))
    return cases


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else REPO / ".gpu")
    out.mkdir(parents=True, exist_ok=True)
    work = WORK
    work.mkdir(exist_ok=True)
    rows: list[dict] = []
    only = set(argv[1:])
    for case, path in fixture_cases():
        if only and case not in only:
            continue
        _save_case(out, case + "_imported", path, False, rows)
        _save_case(out, case + "_recipe", path, True, rows)
    from tests.zoo.models import ZOO
    for name, zm in ZOO.items():
        case = f"zoo_{name}"
        if only and case not in only:
            continue
        fwd, train = work / f"{name}.onnx", work / f"{name}_train.onnx"
        onnx.save(zm.forward(), fwd)
        code = cli(["train-graph", str(fwd), "--loss", zm.loss, "--optimizer", "adamw", "-o", str(train)])
        if code != 0:
            print(f"  train-graph {name}: exit {code}", flush=True)
            continue
        _save_case(out, case + "_recipe", train, True, rows)
    if not only or "bert_base_layer" in only:
        import torch
        from tests.bench.test_bench_autodiff import BATCH, HIDDEN, SEQ, bert_layer
        from tests.peer.test_autodiff_models import _export
        from transforms.autodiff import build_training_graph
        torch.manual_seed(0)
        x = torch.randn(BATCH, SEQ, HIDDEN, generator=torch.Generator().manual_seed(1))
        train = work / "bert_base_layer_train.onnx"
        onnx.save(build_training_graph(_export(bert_layer().train(), (x,)), loss="mse", optimizer="adamw"), train)
        _save_case(out, "bert_base_layer_recipe", train, True, rows)
        _aliased(out, rows)
    listed = out / "cases.json"
    old = json.loads(listed.read_text()) if only and listed.exists() else []
    merged = {r["case"]: r for r in old} | {r["case"]: r for r in rows}
    listed.write_text(json.dumps(list(merged.values()), indent=1), encoding="utf-8")
    print(f"{len(merged)} cases in {listed}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
