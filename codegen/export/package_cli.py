"""The command line of an exported package (``python -m PKG …``), copied into it as ``_cli.py``.

It needs NumPy only (``rich``, when installed, draws the training progress):

- ``--check``: one step on the stored inputs, compared with the ORIGINAL model's outputs (float64,
  computed by dcstudio at export time) within per-output tolerances derived from onnxruntime's own
  fp32 error; ``--time N`` times N steps as a training loop runs them;
- ``train --data BATCHES.npz --steps N``: a training run with the package's ``Model``. Each array
  of ``BATCHES.npz`` is named as a model input; one with an extra leading axis holds a sequence
  of batches (step k takes batch k mod its length), one of the input's own shape is used every
  step. Checkpoints go to ``--checkpoint DIR`` (``last.npz``, every ``--every`` steps and at the
  end); Ctrl-C saves one before it stops; ``--resume`` continues from ``DIR/last.npz``;
- ``export-onnx OUT.onnx [--state CHECKPOINT]``: the forward model with the trained weights.
"""
import argparse
import os
import signal
import sys
import time

import numpy as np


def _check_inputs(data, names):
    return {name: data[f"in_{k}"] for k, name in enumerate(names) if f"in_{k}" in data}


def _error(got, ref, scale):
    if got.shape != ref.shape:
        return float("inf")
    diff = np.where((got == ref) | (np.isnan(got) & np.isnan(ref)), 0.0, np.abs(got - ref))
    return float("inf") if np.isnan(diff).any() else float(diff.max(initial=0.0)) / scale


def _host(x):
    return np.asarray(x.get() if hasattr(x, "get") else x)


def check(model, data, names, outputs, rtol=None):
    out = model.step(**_check_inputs(data, names))
    print(f"compared with {data['about']}")
    failures = 0
    for k, name in enumerate(outputs):
        ref = data[f"out_{k}"].astype(np.float64)
        got = _host(out[name]).astype(np.float64)
        tol = float(data[f"tol_{k}"]) if rtol is None else rtol
        if float(data[f"tol_{k}"]) == 0.0:
            ok, text = got.shape == ref.shape and np.array_equal(got, ref), "exact"
        else:
            err = _error(got, ref, float(data[f"scale_{k}"]))
            ok, text = err <= tol, f"error {err:.3g} (tolerance {tol:.3g})"
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name!a}: {text}")
    print(f"{len(outputs) - failures}/{len(outputs)} outputs match")
    return failures == 0


def time_steps(Model, data, names, n, threads):
    feeds = _check_inputs(data, names)
    model = Model(threads=threads, recycle_outputs=True)
    model.step(**feeds)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        model.step(**feeds)
        times.append(time.perf_counter() - t0)
    times.sort()
    used = model.threads or {}
    print(f"step: median {times[len(times) // 2] * 1e3:.2f} ms, min {times[0] * 1e3:.2f} ms over {n} "
          f"(threads: numba {used.get('numba') or '-'}, BLAS {used.get('blas') or '-'})")


def batches(path, names, shapes):
    """``k -> {input: array}`` over the arrays of ``path`` (see the module docstring)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {key: f[key] for key in f.files}
    except OSError as e:
        raise SystemExit(f"{path}: {e.strerror or e}") from None
    except ValueError:                            # NumPy would unpickle it: never
        raise SystemExit(f"{path}: not an .npz of plain arrays (one per model input)") from None
    unknown = sorted(set(arrays) - set(names))
    if unknown:
        raise SystemExit(f"{path}: {unknown[:5]} are not inputs of the model (it takes {list(names)})")
    shape_of = dict(zip(names, shapes))
    fixed, seqs = {}, {}
    for key, value in arrays.items():
        want = tuple(shape_of[key])
        if value.shape == want:
            fixed[key] = value
        elif value.shape[1:] == want and value.shape[0] > 0:
            seqs[key] = value
        else:
            raise SystemExit(f"{path}: '{key}' has shape {value.shape}; the model takes {want} (one batch) "
                             f"or (B, {', '.join(map(str, want))}) (B batches)")
    return lambda k: {**fixed, **{key: value[k % len(value)] for key, value in seqs.items()}}


class _Progress:
    """rich's progress bar when rich is installed, else a line every second."""

    def __init__(self, total, start):
        self.total, self.done, self.t0, self.last = total, start, time.perf_counter(), 0.0
        try:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
        except ImportError:
            self.bar = None
            return
        self.bar = Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[rate]} steps/s  loss {task.fields[loss]}"), TimeRemainingColumn())
        self.task = self.bar.add_task("train", total=total, completed=start, rate="-", loss="-")
        self.bar.start()

    def update(self, step, loss, steps_done):
        rate = steps_done / max(time.perf_counter() - self.t0, 1e-9)
        if self.bar is not None:
            self.bar.update(self.task, completed=step, rate=f"{rate:.2f}", loss=f"{loss:.5g}")
        elif time.perf_counter() - self.last >= 1.0 or step == self.total:
            self.last = time.perf_counter()
            print(f"step {step}/{self.total}: loss {loss:.5g}, {rate:.2f} steps/s", flush=True)
        return rate

    def stop(self):
        if self.bar is not None:
            self.bar.stop()


class _StopRequest:
    """Ctrl-C during ``train`` asks the loop to stop after the step (and checkpoint) it is in: a
    KeyboardInterrupt raised inside a checkpoint's ``np.savez`` or a side-by-side step would leave a ZIP
    half-closed or a worker running. A second Ctrl-C interrupts at once. Outside the main thread (no
    signals there) nothing is installed."""

    def __init__(self):
        self.requested, self._previous = False, None

    def __enter__(self):
        try:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        except ValueError:
            self._previous = None
        return self

    def _handle(self, signum, frame):
        self.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
        return False


def _load(model, path):
    """``model.load(path)``, or exit saying why the checkpoint was refused (missing, unreadable, another
    model's); a refusal changes nothing."""
    try:
        model.load(path)
    except OSError as e:
        raise SystemExit(f"{path}: {e.strerror or e}") from None
    except ValueError as e:                       # it names the file and says why
        raise SystemExit(str(e)) from None


def train(Model, args, names, shapes):
    model = Model(threads=args.threads, recycle_outputs=True, seed=args.seed)
    os.makedirs(args.checkpoint, exist_ok=True)
    last = os.path.join(args.checkpoint, "last.npz")
    if args.resume and os.path.exists(last):
        _load(model, last)
        print(f"resumed from {last} at step {model.step_count}")
    if args.lr is not None:
        model.lr = args.lr
    batch = batches(args.data, names, shapes)
    first = model.step_count
    progress = _Progress(args.steps, first - 1)
    loss, done = float("nan"), 0
    try:
        with _StopRequest() as stop:
            while model.step_count <= args.steps and not stop.requested:
                out = model.train_step(**batch(model.step_count - 1))
                loss, done = float(_host(out[args.loss_output])), done + 1
                progress.update(model.step_count - 1, loss, done)
                if args.every and (model.step_count - 1) % args.every == 0:
                    model.save(last)
        interrupted = stop.requested
    except KeyboardInterrupt:           # the second Ctrl-C
        interrupted = True
    progress.stop()
    model.save(last)
    if interrupted:
        print(f"interrupted after step {model.step_count - 1}: checkpoint saved to {last} "
              "(continue with --resume)")
        return 130
    rate = done / max(time.perf_counter() - progress.t0, 1e-9)
    print(f"trained steps {first}-{model.step_count - 1}: last loss {loss:.6g}, {rate:.2f} steps/s; "
          f"checkpoint {last}")
    return 0


def export_onnx(Model, args):
    model = Model(threads=0)
    if args.state:
        _load(model, args.state)
    try:
        path = model.export_onnx(args.output)
    except (OSError, RuntimeError) as e:
        raise SystemExit(f"export-onnx: {e}") from None
    weights = f"the weights of {args.state}" if args.state else "its initial weights"
    print(f"wrote {path}: the forward model in eval mode with {weights}")
    return 0


def parser(package):
    p = argparse.ArgumentParser(prog=f"python -m {package}", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="compare one step with the stored references")
    p.add_argument("--rtol", type=float, default=None,
                   help="override: one tolerance for every output instead of the stored ones")
    p.add_argument("--time", type=int, default=0, metavar="N",
                   help="time N steps (after a warm-up step) as a training loop runs them: outputs in "
                        "reused buffers (Model(recycle_outputs=True)), no fresh pages to fault in")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="kernel and BLAS threads (default: $DCSTUDIO_THREADS, else every physical core "
                        "this process may run on)")
    sub = p.add_subparsers(dest="command")
    t = sub.add_parser("train", help="train on batches from an .npz file, with checkpoints")
    t.add_argument("--data", required=True, metavar="BATCHES.npz", help="arrays named as the model's inputs")
    t.add_argument("--steps", type=int, required=True, metavar="N", help="train until step N")
    t.add_argument("--checkpoint", default=f"{package}-checkpoints", metavar="DIR",
                   help="where last.npz is written (default: %(default)s)")
    t.add_argument("--every", type=int, default=100, metavar="K", help="save a checkpoint every K steps (0: "
                   "only at the end and on Ctrl-C)")
    t.add_argument("--resume", action="store_true", help="continue from DIR/last.npz when it exists")
    t.add_argument("--seed", type=int, default=0, help="seed of the dropout masks")
    t.add_argument("--lr", type=float, default=None, help="learning rate (default: the recorded one)")
    t.add_argument("--threads", type=int, default=None, metavar="N", dest="threads")
    e = sub.add_parser("export-onnx", help="write the forward model with the trained weights")
    e.add_argument("output", metavar="OUT.onnx")
    e.add_argument("--state", metavar="CHECKPOINT.npz", help="a checkpoint to take the weights from")
    return p


def main(Model, package, argv=None):
    P = Model.P
    args = parser(package).parse_args(argv)
    problem = P.L.device_problem()
    if problem:
        print(f"{package}: {problem}", file=sys.stderr)
        return 2
    if args.command == "train":
        args.loss_output = P.FORWARD_OUTPUTS[0]
        return train(Model, args, P.INPUTS, P._INPUT_SHAPES)
    if args.command == "export-onnx":
        return export_onnx(Model, args)
    with np.load(os.path.join(P.DIRECTORY, "check.npz")) as f:
        data = {key: f[key] for key in f.files}
    ok = check(Model(threads=args.threads), data, P.INPUTS, P.OUTPUTS, args.rtol) if args.check or not args.time \
        else True
    if args.time:
        time_steps(Model, data, P.INPUTS, args.time, args.threads)
    return 0 if ok else 1
