"""``TrainingOptions``: the recorded options of one generated training graph.

A frozen value object. ``__post_init__`` validates every field and fills the
optimizer's default ``betas``, so the JSON form (``to_json`` -> dict, ``from_json``)
records exactly what was generated; histories store it beside the source model's hash.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from ir.errors import StudioError

LOSSES = ("cross_entropy", "mse")
OPTIMIZERS = ("sgd", "adamw", "lion")
TRAINABLE_SETS = ("parameters", "all")
DEFAULT_BETAS = {"adamw": (0.9, 0.999), "lion": (0.9, 0.99)}


class OptionError(StudioError, ValueError):
    """An invalid training-graph option (names the option and the accepted values)."""


@dataclass(frozen=True, slots=True)
class TrainingOptions:
    """How to turn a forward model into a training step.

    - ``loss``: ``"cross_entropy"`` (SoftmaxCrossEntropyLoss, mean, optional ``ignore_index``)
      or ``"mse"`` (mean over all elements), applied to the forward output ``output``
      (default: the first graph output).
    - ``optimizer``: ``"sgd"`` (``momentum``), ``"adamw"`` (``betas``, ``eps``), ``"lion"``
      (``betas``) or None (gradients only); ``lr`` is the learning rate the studio feeds to
      the ``learning_rate`` input; ``weight_decay`` is decoupled for AdamW and Lion.
    - ``trainable``: ``"parameters"`` (the model's parameters that reach the loss, not the
      exporter's constants: ``parameters.choose_parameters``), ``"all"`` (every float
      initializer of rank >= 1 that reaches the loss, constants included) or parameter names.
    - ``emit_gradients``: also output ``<p>_grad``.
    - ``batchnorm``: ``"train"`` (batch statistics, the default for training) or ``"eval"``.
    - ``initial_values``: keep the parameters' initial values as default input values.
    - ``untie``: initializers to give every module that reads them a copy of its own
      (``sharing.untie``: parameters the exporter merged).
    """

    FORMAT: ClassVar[str] = "dcstudio-training-options"

    loss: str = "cross_entropy"
    optimizer: str | None = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.0
    momentum: float = 0.9
    betas: tuple[float, float] | None = None
    eps: float = 1e-8
    trainable: str | tuple[str, ...] = "parameters"
    emit_gradients: bool = True
    ignore_index: int | None = None
    batchnorm: str = "train"
    output: str | None = None
    initial_values: bool = True
    untie: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _choice("loss", self.loss, LOSSES)
        _choice("optimizer", self.optimizer, OPTIMIZERS + (None,))
        _choice("batchnorm", self.batchnorm, ("train", "eval"))
        for name in ("lr", "weight_decay", "momentum", "eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise OptionError(f"option {name}={value!r} must be a number >= 0")
            object.__setattr__(self, name, float(value))
        if self.lr <= 0:
            raise OptionError(f"option lr={self.lr!r} must be > 0")
        object.__setattr__(self, "betas", self._resolved_betas())
        object.__setattr__(self, "trainable", self._resolved_trainable())
        if isinstance(self.untie, str) or not all(isinstance(n, str) for n in self.untie):
            raise OptionError(f"option untie={self.untie!r} must be a list of initializer names")
        object.__setattr__(self, "untie", tuple(self.untie))
        if self.ignore_index is not None and (isinstance(self.ignore_index, bool)
                                              or not isinstance(self.ignore_index, int)):
            raise OptionError(f"option ignore_index={self.ignore_index!r} must be an int or None")
        if self.optimizer is None and not self.emit_gradients:
            raise OptionError("optimizer=None with emit_gradients=False leaves nothing to output; "
                              "pick an optimizer or emit the gradients")

    def _resolved_betas(self) -> tuple[float, float] | None:
        if self.betas is None:
            return DEFAULT_BETAS.get(self.optimizer or "")
        betas = tuple(float(b) for b in self.betas)
        if len(betas) != 2 or not all(0 <= b < 1 for b in betas):
            raise OptionError(f"option betas={self.betas!r} must be two numbers in [0, 1)")
        return betas  # type: ignore[return-value]

    def _resolved_trainable(self) -> str | tuple[str, ...]:
        if self.trainable in TRAINABLE_SETS:
            return self.trainable
        if isinstance(self.trainable, str) or not all(isinstance(n, str) for n in self.trainable):
            raise OptionError(f"option trainable={self.trainable!r} must be 'parameters', 'all' or a list of "
                              "parameter names")
        return tuple(self.trainable)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists) tagged with ``format``."""
        out = {"format": self.FORMAT}
        for key, value in asdict(self).items():
            out[key] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any] | str) -> "TrainingOptions":
        """Inverse of ``to_json`` (accepts the dict or its JSON text)."""
        if isinstance(data, str):
            data = json.loads(data)
        if not isinstance(data, dict) or data.get("format", cls.FORMAT) != cls.FORMAT:
            raise OptionError("training options JSON must be an object with "
                              f"format '{cls.FORMAT}'")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known - {"format"})
        if unknown:
            raise OptionError(f"unknown training options {unknown}; known: {sorted(known)}")
        kwargs = {k: v for k, v in data.items() if k in known}
        for key in ("betas", "trainable", "untie"):
            if isinstance(kwargs.get(key), list):
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)


def _choice(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        shown = ", ".join(repr(a) for a in allowed)
        raise OptionError(f"option {name}={value!r} is not one of {shown}")
