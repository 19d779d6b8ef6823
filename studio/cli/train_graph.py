"""``dcstudio train-graph FORWARD.onnx --loss … --optimizer … -o TRAIN.onnx``.

Builds the standard-ONNX training step (``transforms.autodiff``): inputs are
data, labels, parameters, optimizer state, ``learning_rate`` and ``step``;
outputs the loss, new parameters, new state and (unless ``--no-gradients``)
the gradients. Plain onnxruntime runs the result. The file is written
atomically; on any error nothing is written and the message names the op/node.

It prints what is trained and what is kept constant (``ParameterPlan.lines``).
``--trainable`` picks the set: ``parameters`` (default: the model's parameters, not
the exporter's constants), ``all`` (every float initializer of rank >= 1), names
separated by commas, or ``@FILE`` (one name per line; ``#`` starts a comment).
``--list-parameters`` prints the trained names one per line (a ``@FILE`` to edit)
and writes nothing. A parameter read by several modules is reported (it trains as one, its
gradients added: a tie the model makes, or equal tensors the exporter merged); ``--untie NAME``
gives each of those modules its own copy. BatchNorm running statistics and dropout masks are
step inputs and outputs (``transforms.autodiff``), which the exported ``Model`` feeds itself.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ir.errors import StudioError
from ir.onnx_load import read_model
from transforms.autodiff import write_training_graph
from transforms.autodiff.options import LOSSES, OPTIMIZERS, TRAINABLE_SETS
from transforms.autodiff.training_graph import plan_parameters


def _trainable(text: str) -> str | tuple[str, ...]:
    if text in TRAINABLE_SETS:
        return text
    if text.startswith("@"):
        try:
            lines = Path(text[1:]).read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise StudioError(f"cannot read the trainable-name file '{text[1:]}': {e.strerror}. "
                              "Give a text file with one parameter name per line") from None
        names = tuple(n for n in (line.split("#")[0].strip() for line in lines) if n)
    else:
        names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise StudioError(f"--trainable {text!r} names no parameter. Give 'parameters', 'all', names "
                          "separated by commas, or @FILE")
    return names


def cmd_train_graph(args: argparse.Namespace) -> int:
    options = dict(loss=args.loss, optimizer=None if args.optimizer == "none" else args.optimizer, lr=args.lr,
                   weight_decay=args.weight_decay, momentum=args.momentum, trainable=_trainable(args.trainable),
                   emit_gradients=not args.no_gradients, ignore_index=args.ignore_index, batchnorm=args.batchnorm,
                   untie=tuple(n.strip() for text in args.untie for n in text.split(",") if n.strip()))
    if args.list_parameters:
        print("\n".join(plan_parameters(read_model(args.forward), **options).trained))
        return 0
    if not args.output:
        raise StudioError("train-graph needs -o/--output TRAIN.onnx (or --list-parameters)")
    out = write_training_graph(args.forward, args.output, on_plan=lambda plan: print("\n".join(plan.lines())),
                               **options)
    print(f"wrote {out}: {args.loss} loss, {args.optimizer} optimizer (lr {args.lr:g}, weight decay "
          f"{args.weight_decay:g})")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("train-graph", help="generate a standard-ONNX training step from a forward model")
    p.add_argument("forward", help="forward ONNX model (static shapes)")
    p.add_argument("-o", "--output", help="training graph to write")
    p.add_argument("--loss", choices=LOSSES, default="cross_entropy")
    p.add_argument("--optimizer", choices=(*OPTIMIZERS, "none"), default="adamw")
    p.add_argument("--lr", type=float, default=1e-3, help="learning rate recorded in the graph's metadata")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    p.add_argument("--trainable", default="parameters",
                   help="'parameters' (default: the model's parameters, not exporter constants such as masks "
                        "and scales), 'all' (every float initializer of rank >= 1), comma-separated names, or "
                        "@FILE with one name per line")
    p.add_argument("--list-parameters", action="store_true",
                   help="print the names that would be trained, one per line, and write nothing")
    p.add_argument("--untie", action="append", default=[], metavar="NAME",
                   help="give every module that reads initializer NAME a copy of its own (parameters the exporter "
                        "merged because their values were equal); repeat it or separate names with commas")
    p.add_argument("--batchnorm", choices=("train", "eval"), default="train",
                   help="BatchNorm in the step: 'train' (batch statistics, running statistics updated, as PyTorch's "
                        "train()) or 'eval' (the running statistics, frozen)")
    p.add_argument("--ignore-index", type=int, default=None, help="cross-entropy label to ignore")
    p.add_argument("--no-gradients", action="store_true", help="do not output the gradients")
    p.set_defaults(func=cmd_train_graph)
