"""The ``dcstudio`` command line: the parser of every command (one module each in ``studio.cli``) and ``main``.

Exit codes: 0 ok, 1 numeric/regression failure, 2 bad input. Errors print one
line (file, node, what to do) without a traceback unless ``--debug``.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from ir.errors import StudioError

EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dcstudio", description="Data-centric optimization studio for "
                                "ONNX training graphs.")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from studio.cli import export, inspect, open, profile, recipe, replay, train_graph, tune
    for command in (inspect, replay, open, recipe, train_graph, export, profile, tune):
        command.add_parser(sub)                   # in the order ``dcstudio --help`` lists them
    return p


def one_malloc_arena() -> bool:
    """Ask glibc's malloc for one arena shared by every thread (``mallopt(M_ARENA_MAX, 1)``), before
    any worker thread starts. By default each thread that allocates gets an arena of its own, and
    the large arrays a thread frees stay in its arena: ``replay --check`` of a 12-layer BERT step,
    whose oracle runs on a second thread, peaked at 7.7 GB with arenas per thread and 6.7 GB with one
    (as high as with no second thread), in the same time. False where the C library has no mallopt."""
    import ctypes
    try:
        return bool(ctypes.CDLL(None).mallopt(-8, 1))       # M_ARENA_MAX = -8 (malloc.h)
    except (OSError, AttributeError, TypeError):
        return False


def main(argv: Sequence[str] | None = None) -> int:
    one_malloc_arena()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except StudioError as e:
        if args.debug:
            raise
        print(f"dcstudio: error: {e.summary}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # the reader went away (`dcstudio inspect M | head`): no traceback, and none at exit either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13                                   # as a shell reports SIGPIPE
    except KeyboardInterrupt:
        print("dcstudio: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
