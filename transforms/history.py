"""The transformation history: a value, and its JSON file format.

A ``History`` is the source model's identity (sha256 and name), the symbol
bindings, the training-graph options when the graph was generated, and the
ordered ``Step``s (transformation name, params, anchor ids, and the expected
bytes after the step). File format (``format: "dcstudio-history"``)::

    {"format": "dcstudio-history", "version": 3,
     "model": {"sha256": "…", "name": "bert_layer_base_train.onnx"},
     "bindings": {"batch": 8}, "training": null,
     "steps": [{"transformation": "map_fusion", "params": {}, "anchors": ["a", "b"],
                "expect": {"bytes_after": 123}}]}

Version 2 (2026-11): ``training.trainable`` defaults to ``"parameters"`` (the model's own
parameters); a version-1 file's training options without ``trainable`` meant every float
initializer, so loading one fills in ``"all"`` and it regenerates the graph it was recorded on.
Version 3 (2026-11) adds pass steps, ``{"transformation": "map_fusion", "params": {},
"pass": {"applications": 426, "graph_hash": "…"}}``: the transformation applied to a fixpoint
(``transforms.passes``); versions 1 and 2 read as before.

Version 4 (2026-11) adds transfer tuning (``transforms.transfer``): a pass step may be limited
to one layer (``"pass": {…, "scope": "encoder/layer.0"}``), and a transfer step re-applies the
steps before it to structurally equal layers, ``{"transformation": "transfer", "params":
{"layer": "encoder/layer.0", "steps": 13, "to": ["encoder/layer.1", …]}, "transfer":
{"applications": 3900, "graph_hash": "…"}}``; replay checks the count and the graph hash.
Loading validates the whole schema (nothing is evaluated or unpickled) and says
what is wrong and where; saving writes atomically (temp file + rename).
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ir.errors import StudioError

FORMAT = "dcstudio-history"
VERSION = 4
TRANSFER = "transfer"      # the step name of transfers (no transformation has it)


class HistoryError(StudioError):
    """A history file that cannot be read or does not fit the model."""


@dataclass(frozen=True)
class Step:
    """One application at ``anchors``, or (``applications`` set) a pass: the transformation
    applied to a fixpoint (``transforms.passes``), recorded with its application count and
    the graph hash it produced, which replay checks."""

    transformation: str
    params: dict[str, Any]
    anchors: tuple[str, ...]
    bytes_after: int | None = None
    applications: int | None = None
    graph_hash: str | None = None
    scope: str | None = None          # a pass limited to one layer (``transforms.layers``)

    @property
    def is_transfer(self) -> bool:
        """A transfer step (``transforms.transfer``): earlier steps re-applied to equal layers."""
        return self.transformation == TRANSFER

    @property
    def is_pass(self) -> bool:
        return self.applications is not None and not self.is_transfer

    def to_json(self) -> dict:
        d: dict = {"transformation": self.transformation, "params": dict(self.params)}
        if self.is_transfer:
            d["transfer"] = {"applications": self.applications, "graph_hash": self.graph_hash}
        elif self.is_pass:
            d["pass"] = {"applications": self.applications, "graph_hash": self.graph_hash}
            if self.scope is not None:
                d["pass"]["scope"] = self.scope
        else:
            d["anchors"] = list(self.anchors)
        if self.bytes_after is not None:
            d["expect"] = {"bytes_after": self.bytes_after}
        return d


@dataclass(frozen=True)
class History:
    model_sha256: str
    model_name: str
    steps: tuple[Step, ...] = ()
    bindings: dict[str, int] = field(default_factory=dict)
    training: dict[str, Any] | None = None

    def with_steps(self, steps) -> "History":
        return History(self.model_sha256, self.model_name, tuple(steps), dict(self.bindings), self.training)

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION,
                "model": {"sha256": self.model_sha256, "name": self.model_name},
                "bindings": dict(sorted(self.bindings.items())), "training": self.training,
                "steps": [s.to_json() for s in self.steps]}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=False) + "\n"


def _expect(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise HistoryError(f"{where}: {what}")


def _json_scalar_tree(value: Any) -> bool:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return True
    if isinstance(value, list):
        return all(_json_scalar_tree(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_scalar_tree(v) for k, v in value.items())
    return False


def _step_from_json(k: int, d: Any) -> Step:
    where = f"step {k}"
    _expect(isinstance(d, dict), where, "must be an object")
    name = d.get("transformation")
    _expect(isinstance(name, str) and name, where, "needs a 'transformation' name")
    params = d.get("params", {})
    _expect(isinstance(params, dict) and _json_scalar_tree(params), where, "'params' must be a JSON object")
    expect = d.get("expect", {})
    _expect(isinstance(expect, dict), where, "'expect' must be an object")
    after = expect.get("bytes_after")
    _expect(after is None or _count(after), where, "'expect.bytes_after' must be a non-negative integer")
    if name == TRANSFER:
        return _transfer_from_json(where, d, params, after)
    if "pass" in d:
        p = d["pass"]
        _expect(isinstance(p, dict) and _count(p.get("applications")), where,
                "'pass.applications' must be a non-negative integer")
        h = p.get("graph_hash")
        _expect(_digest_or_none(h), where, "'pass.graph_hash' must be a sha256 hex digest or null")
        scope = p.get("scope")
        _expect(scope is None or isinstance(scope, str) and scope, where, "'pass.scope' must be a layer name")
        _expect("anchors" not in d or d["anchors"] == [], where, "a pass step has no anchors")
        return Step(name, params, (), after, p["applications"], h, scope)
    anchors = d.get("anchors")
    _expect(isinstance(anchors, list) and all(isinstance(a, str) for a in anchors), where,
            "'anchors' must be a list of node ids")
    return Step(name, params, tuple(anchors), after)


def _digest_or_none(h: Any) -> bool:
    return h is None or isinstance(h, str) and len(h) == 64 and all(ch in "0123456789abcdef" for ch in h)


def _transfer_from_json(where: str, d: dict, params: dict, after) -> Step:
    t = d.get("transfer")
    _expect(isinstance(t, dict) and _count(t.get("applications")), where,
            "a transfer step needs 'transfer.applications' (a non-negative integer)")
    _expect(_digest_or_none(t.get("graph_hash")), where, "'transfer.graph_hash' must be a sha256 hex digest or null")
    _expect(isinstance(params.get("layer"), str) and params["layer"], where,
            "'params.layer' must name the tuned layer (like 'encoder/layer.0')")
    _expect(_count(params.get("steps")) and params["steps"] > 0, where,
            "'params.steps' must be the (positive) number of steps before it to transfer")
    to = params.get("to")
    _expect(isinstance(to, list) and to and all(isinstance(x, str) and x for x in to), where,
            "'params.to' must list the layers to transfer to")
    _expect("anchors" not in d or d["anchors"] == [], where, "a transfer step has no anchors")
    return Step(TRANSFER, params, (), after, t["applications"], t.get("graph_hash"))


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def from_json(d: Any) -> History:
    """Validate and convert parsed JSON; raises HistoryError saying what and where."""
    _expect(isinstance(d, dict), "history", "the top level must be a JSON object")
    _expect(d.get("format") == FORMAT, "history", f"'format' must be {FORMAT!r} (got {d.get('format')!r})")
    version = d.get("version")
    _expect(isinstance(version, int), "history", "'version' must be an integer")
    _expect(version <= VERSION, "history", f"version {version} is newer than this dcstudio understands "
            f"(up to {VERSION}); upgrade dcstudio")
    _expect(version >= 1, "history", f"version {version} is not valid")
    model = d.get("model")
    _expect(isinstance(model, dict) and isinstance(model.get("sha256"), str) and isinstance(model.get("name"), str),
            "history", "'model' must hold 'sha256' and 'name' strings")
    bindings = d.get("bindings", {})
    _expect(isinstance(bindings, dict) and all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                               for k, v in bindings.items()),
            "history", "'bindings' must map names to integers")
    training = d.get("training")
    _expect(training is None or (isinstance(training, dict) and _json_scalar_tree(training)), "history",
            "'training' must be null or an object")
    if version == 1 and training is not None and "trainable" not in training:
        training = {**training, "trainable": "all"}      # the version-1 default (see the module docstring)
    steps = d.get("steps")
    _expect(isinstance(steps, list), "history", "'steps' must be a list")
    return History(model["sha256"], model["name"], tuple(_step_from_json(k + 1, s) for k, s in enumerate(steps)),
                   dict(bindings), training)


def load(path: str | os.PathLike) -> History:
    """Read and validate a history file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HistoryError("file not found", path=str(path)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise HistoryError(f"cannot read the file ({e})", path=str(path)) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise HistoryError(f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); "
                           "is this a dcstudio history file?", path=str(path)) from None
    try:
        return from_json(data)
    except HistoryError as e:
        raise HistoryError(str(e), path=str(path)) from None


def save(history: History, path: str | os.PathLike) -> None:
    """Write atomically: a temp file in the same folder, then rename over ``path``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(history.dumps())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_model(history: History, sha256: str, name: str, path: str | None = None) -> None:
    """The history must belong to this model (same sha256)."""
    if history.model_sha256 != sha256:
        raise HistoryError(f"it was recorded on a different model ('{history.model_name}', sha256 "
                           f"{history.model_sha256[:12]}…) than '{name}' (sha256 {sha256[:12]}…); "
                           "replay it on the model it was made for", path=path)


def bindings_of(history: History) -> Mapping[str, int]:
    return dict(history.bindings)
