"""Reading ONNX files safely: parse errors, truncation and external data.

``read_model(path)`` returns a ``ModelProto`` with external tensors loaded, or
raises ``ModelImportError`` naming the file and saying what to do. External
data must stay inside the model's folder: absolute paths, ``..`` escapes and
symlinks that leave the folder are refused. Nothing is evaluated or unpickled.

A file of ``PIECES_FROM`` bytes or more is parsed in pieces (``_parse_in_pieces``): the model
without its graph, the graph without its initializers, then each initializer on its own. One
protobuf parse holds the GIL for as long as it runs: 0.23-0.30 s for a 350 MB 12-layer step,
which froze the studio loading it on a worker thread. In pieces, no call holds it longer than
the largest tensor takes (a few ms). The result is the same message (tested); a file whose
fields cannot be walked is parsed whole, so a corrupt file gets the usual error.
"""
from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from google.protobuf.message import DecodeError
from onnx import ModelProto, TensorProto

from ir.errors import ModelImportError


PIECES_FROM = 32 << 20
_GRAPH, _INITIALIZER = 7, 5           # ModelProto.graph, GraphProto.initializer
_LEN = 2                              # the length-delimited wire type


def _fail(path: Path, message: str, hint: str) -> ModelImportError:
    return ModelImportError(f"{message}. {hint}", path=str(path))


class Digest:
    """The SHA-256 of a file's bytes, hashed on a thread while the caller parses them (hashlib
    releases the GIL: on a 1.2 GB 24-layer step it overlaps the 1 s of hashing with the parse)."""

    CHUNK = 16 << 20

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._hex = ""

    def start(self, blob: bytes) -> None:
        def work() -> None:
            h, view = hashlib.sha256(), memoryview(blob)
            for at in range(0, len(view), self.CHUNK):
                h.update(view[at:at + self.CHUNK])
            self._hex = h.hexdigest()
        self._thread = threading.Thread(target=work, name="dcstudio-sha256", daemon=True)
        self._thread.start()

    def hexdigest(self) -> str:
        if self._thread is not None:
            self._thread.join()
        return self._hex


def read_model(path: str | os.PathLike, *, digest: Digest | None = None) -> ModelProto:
    """Parse ``path`` as an ONNX model and load its external data (confined to its folder);
    ``digest`` hashes the file's bytes alongside."""
    path = Path(path)
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        raise _fail(path, "file not found", "Check the path") from None
    except IsADirectoryError:
        raise _fail(path, "is a directory, not an ONNX file", "Pass the .onnx file itself") from None
    except OSError as e:
        raise _fail(path, f"cannot read the file ({e.strerror})", "Check permissions") from None
    if not blob:
        raise _fail(path, "the file is empty", "Re-export the model")
    if digest is not None:
        digest.start(blob)
    model = ModelProto()
    try:
        if len(blob) < PIECES_FROM or not _parse_in_pieces(blob, model):
            model.ParseFromString(blob)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise _fail(path, f"not a valid ONNX protobuf ({type(e).__name__}: {str(e)[:80]}); "
                    "the file is corrupt, truncated or not ONNX", "Re-export or re-download the model") from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise _fail(path, "parsed, but holds no graph (nodes and outputs are missing); "
                    "the file is probably truncated or not an ONNX model", "Re-export the model")
    _load_external(model, path)
    return model


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    value, shift = 0, 0
    while pos < end and shift < 70:
        b = buf[pos]
        value |= (b & 0x7F) << shift
        pos += 1
        if b < 0x80:
            return value, pos
        shift += 7
    raise ValueError("bad varint")


def _fields(buf: memoryview, start: int, end: int) -> list[tuple[int, int, int, int, int]]:
    """The fields of the message in ``buf[start:end]``: (number, wire type, start, payload start,
    end); ValueError when they cannot be walked (groups, truncation)."""
    out, pos = [], start
    while pos < end:
        tag, p = _varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            q = _varint(buf, p, end)[1]
        elif wire == 1:
            q = p + 8
        elif wire == 5:
            q = p + 4
        elif wire == _LEN:
            n, p = _varint(buf, p, end)
            q = p + n
        else:
            raise ValueError("group or unknown wire type")
        if number == 0 or q > end:
            raise ValueError("bad field")
        out.append((number, wire, pos, p, q))
        pos = q
    return out


def _parse_in_pieces(blob: bytes, model: ModelProto) -> bool:
    """Parse ``blob`` into ``model`` piece by piece (see the module docstring); False, with ``model``
    untouched, when its fields cannot be walked."""
    buf = memoryview(blob)
    try:
        top = _fields(buf, 0, len(buf))
        graphs = [f for f in top if f[0] == _GRAPH and f[1] == _LEN]
        if len(graphs) != 1:
            return False
        inner = _fields(buf, graphs[0][3], graphs[0][4])
    except ValueError:
        return False
    model.ParseFromString(b"".join(bytes(buf[s:e]) for n, w, s, _p, e in top if (n, w) != (_GRAPH, _LEN)))
    model.graph.MergeFromString(b"".join(bytes(buf[s:e]) for n, w, s, _p, e in inner
                                         if (n, w) != (_INITIALIZER, _LEN)))
    initializers = model.graph.initializer
    for n, w, _s, p, e in inner:
        if (n, w) == (_INITIALIZER, _LEN):
            initializers.add().MergeFromString(buf[p:e])
    return True


def _external_tensors(model: ModelProto):
    graph = model.graph
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors


def _load_external(model: ModelProto, path: Path) -> None:
    base = path.resolve().parent
    for tensor in _external_tensors(model):
        if tensor.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        loc = info.get("location", "")
        target = (base / loc).resolve()
        if not loc or os.path.isabs(loc) or (target != base and base not in target.parents):
            raise _fail(path, f"initializer '{tensor.name}' points to external data '{loc}' outside "
                        "the model's folder; refused for safety",
                        "Move the data file next to the model and re-save it with a relative location")
        try:
            with open(target, "rb") as fh:
                fh.seek(int(info.get("offset", 0)))
                length = info.get("length")
                raw = fh.read(int(length)) if length is not None else fh.read()
        except OSError as e:
            raise _fail(path, f"external data '{loc}' of initializer '{tensor.name}' cannot be read "
                        f"({e.strerror})", "Keep the data file next to the model") from None
        if length is not None and len(raw) != int(length):
            raise _fail(path, f"external data '{loc}' of initializer '{tensor.name}' is truncated "
                        f"({len(raw)} of {length} bytes)", "Re-save the model with its data")
        tensor.raw_data = raw
        del tensor.external_data[:]
        tensor.data_location = TensorProto.DEFAULT


def opset_map(model: ModelProto) -> dict[str, int]:
    """domain -> opset version ('' for the default domain)."""
    out: dict[str, int] = {}
    for imp in model.opset_import:
        dom = "" if imp.domain in ("", "ai.onnx") else imp.domain
        out[dom] = int(imp.version)
    return out


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


