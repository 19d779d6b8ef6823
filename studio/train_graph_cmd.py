"""``dcstudio train-graph FORWARD.onnx --loss … --optimizer … -o TRAIN.onnx``.

Builds the standard-ONNX training step (``transforms.autodiff``): inputs are
data, labels, parameters, optimizer state, ``learning_rate`` and ``step``;
outputs the loss, new parameters, new state and (unless ``--no-gradients``)
the gradients. Plain onnxruntime runs the result. The file is written
atomically; on any error nothing is written and the message names the op/node.
"""
from __future__ import annotations

import argparse

from transforms.autodiff import write_training_graph
from transforms.autodiff.options import LOSSES, OPTIMIZERS


def _trainable(text: str) -> str | tuple[str, ...]:
    return "all" if text == "all" else tuple(n.strip() for n in text.split(",") if n.strip())


def cmd_train_graph(args: argparse.Namespace) -> int:
    options = dict(loss=args.loss, optimizer=None if args.optimizer == "none" else args.optimizer, lr=args.lr,
                   weight_decay=args.weight_decay, momentum=args.momentum, trainable=_trainable(args.trainable),
                   emit_gradients=not args.no_gradients, ignore_index=args.ignore_index)
    out = write_training_graph(args.forward, args.output, **options)
    print(f"wrote {out}: {args.loss} loss, {args.optimizer} optimizer (lr {args.lr:g}, weight decay "
          f"{args.weight_decay:g})")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("train-graph", help="generate a standard-ONNX training step from a forward model")
    p.add_argument("forward", help="forward ONNX model (static shapes)")
    p.add_argument("-o", "--output", required=True, help="training graph to write")
    p.add_argument("--loss", choices=LOSSES, default="cross_entropy")
    p.add_argument("--optimizer", choices=(*OPTIMIZERS, "none"), default="adamw")
    p.add_argument("--lr", type=float, default=1e-3, help="learning rate recorded in the graph's metadata")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    p.add_argument("--trainable", default="all", help="'all' or comma-separated parameter names")
    p.add_argument("--ignore-index", type=int, default=None, help="cross-entropy label to ignore")
    p.add_argument("--no-gradients", action="store_true", help="do not output the gradients")
    p.set_defaults(func=cmd_train_graph)
