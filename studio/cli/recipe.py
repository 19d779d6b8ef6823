"""``dcstudio recipe MODEL -o HISTORY``: run a named recipe and save its history.

The history is an ordinary step-by-step file (``dcstudio replay`` reproduces it);
it is written atomically, and only when the recipe ran to the end.
"""
from __future__ import annotations

import argparse
import sys

from studio.session.recipe import AUTO, RECIPES, pick, run_recipe, tune_one_layer
from studio.session.core import Session


def cmd_recipe(args: argparse.Namespace) -> int:
    from studio.text import parse_bindings
    session = Session.open(args.model, bindings=parse_bindings(args.bind), optimizer=args.optimizer,
                           autosave=False)
    before = session.metrics()

    tty = sys.stderr.isatty()
    last = ["", ""]                                   # pass name, its latest line

    def on_step(name: str, k: int) -> None:
        if args.quiet:
            return
        line = f"{k:5d} steps  {name:<24} {session.metrics().bytes / 1e6:10.2f} MB"
        if tty:
            sys.stderr.write("\r" + line)             # one updating line on a terminal
        elif name != last[0] and last[1]:
            sys.stderr.write(last[1] + "\n")          # in logs: one line per finished pass
        last[:] = [name, line]

    run = tune_one_layer if args.tune_one_layer else run_recipe
    name = pick(session.graph, args.name)
    counts = run(session, RECIPES[name], on_step=on_step)
    if not args.quiet and (tty or last[1]):
        sys.stderr.write("\n" if tty else last[1] + "\n")
    session.save_history(args.output)
    after = session.metrics()
    applied = ", ".join(f"{n} ×{c}" for n, c in counts.items() if c)
    print(f"{name}: {session.cursor} steps ({applied}); {before.bytes / 1e6:.2f} MB -> "
          f"{after.bytes / 1e6:.2f} MB ({after.bytes / before.bytes - 1:+.1%}), bound {after.bound / 1e6:.2f} MB, "
          f"moved/bound {before.ratio:.2f}x -> {after.ratio:.2f}x; wrote {args.output}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("recipe", help="run a transformation recipe and save the history")
    p.add_argument("model", help="ONNX model")
    p.add_argument("-o", "--output", required=True, help="history file to write")
    p.add_argument("--recipe", "--name", dest="name", choices=sorted(RECIPES) + [AUTO], default=AUTO,
                   help="recipe (default auto: cnn when the model has convolutions, else substation)")
    p.add_argument("--bind", action="append", default=[], metavar="NAME=N")
    p.add_argument("--optimizer", help="ORT optimizer_model.onnx (default: beside MODEL)")
    p.add_argument("--tune-one-layer", action="store_true",
                   help="run the passes on the first of each family of equal layers, repeat its steps on the "
                        "others (one transfer step), then on the whole graph")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_recipe)
