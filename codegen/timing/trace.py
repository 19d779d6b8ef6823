"""Chrome trace JSON (``chrome://tracing``, Perfetto) of one profiled step.

``chrome_trace(profile)`` lays the kernels of the last timed step on one track, at the
times they started (relative to the first), each an ``"X"`` (complete) event with its
duration and, in ``args``, its id, kind, bytes, FLOPs, GB/s and efficiency; failed
kernels become instant events named after their error. Load it with Perfetto's
"Open trace file".
"""
from __future__ import annotations

import json
from pathlib import Path

from codegen.timing.profiler import Profile


def chrome_trace(profile: Profile, name: str = "dcstudio step") -> dict:
    starts = [k.extra.get("start_ns", 0) for k in profile.kernels if k.extra.get("start_ns")]
    t0 = min(starts) if starts else 0
    events = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": name}},
              {"name": "thread_name", "ph": "M", "pid": 1, "tid": 1,
               "args": {"name": f"kernels ({profile.threads.get('numba_threads')} numba threads)"}}]
    for k in profile.kernels:
        ts = (k.extra.get("start_ns", t0) - t0) / 1e3
        if not k.ok:
            events.append({"name": f"{k.node_id} FAILED", "ph": "i", "s": "t", "pid": 1, "tid": 1, "ts": ts,
                           "args": {"error": k.error}})
            continue
        last = k.extra.get("samples_ns") or [k.samples.median_s * 1e9]
        events.append({"name": k.node_id, "cat": k.kind, "ph": "X", "pid": 1, "tid": 1, "ts": ts,
                       "dur": last[-1] / 1e3,
                       "args": {"label": k.label, "bytes": k.bytes, "flops": k.flops, "median_ms": k.samples.median_s * 1e3,
                                "GB/s": round(k.gbps, 3), "efficiency": round(k.efficiency, 4)}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(profile: Profile, path: str | Path) -> None:
    Path(path).write_text(json.dumps(chrome_trace(profile)), encoding="utf-8")
