"""The registry of transformations: ``TRANSFORMATIONS[name] -> class``.

Each transformation lives in ``transforms/<name>.py`` (file stem = registry name,
``map_fusion.py`` → ``"map_fusion"`` → ``class MapFusion``) and registers itself
with ``@register``. ``transforms/__init__.py`` imports every such file from one
sorted list. ``create(name, params)`` builds an instance from history JSON,
accepting only the dataclass's own fields.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from ir.errors import StudioError
from transforms.base import Transformation

TRANSFORMATIONS: dict[str, type[Transformation]] = {}


class UnknownTransformation(StudioError):
    """A history or a command names a transformation that does not exist."""


def register(cls: type[Transformation]) -> type[Transformation]:
    """Class decorator: add ``cls`` under ``cls.name`` (the module's file stem)."""
    stem = cls.__module__.rsplit(".", 1)[-1]
    if cls.name != stem:
        raise ValueError(f"transformation {cls.__name__}: name {cls.name!r} must equal its file stem {stem!r}")
    if cls.name in TRANSFORMATIONS:
        raise ValueError(f"duplicate transformation {cls.name!r}")
    if not 1 <= cls.level <= 4:
        raise ValueError(f"transformation {cls.name!r}: level must be 1-4")
    TRANSFORMATIONS[cls.name] = cls
    return cls


def create(name: str, params: Mapping[str, Any] | None = None) -> Transformation:
    """An instance of transformation ``name`` with ``params`` (unknown keys are an error)."""
    cls = TRANSFORMATIONS.get(name)
    if cls is None:
        known = ", ".join(sorted(TRANSFORMATIONS))
        raise UnknownTransformation(f"unknown transformation '{name}' (known: {known})")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    params = dict(params or {})
    extra = sorted(set(params) - set(fields))
    if extra:
        raise UnknownTransformation(f"transformation '{name}' has no parameter(s) {extra} "
                                    f"(parameters: {sorted(fields) or 'none'})")
    try:
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in params.items()})
    except (TypeError, ValueError) as e:
        raise UnknownTransformation(f"bad parameters for '{name}': {e}") from None
