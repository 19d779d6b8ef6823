"""How many threads an exported step uses by default: the physical cores this process may run on (and
whether the machine can run the package at all: the CPU always can).

A part of the CPU library (``library.py`` imports it relatively; an exported package carries it
beside ``_lib.py``), so it imports only the standard library.
"""
from __future__ import annotations

import os


def physical_cores(cpus=None, sysfs: str = "/sys/devices/system/cpu") -> int:
    """Physical cores among ``cpus`` (default: the CPUs this process may run on, its affinity
    mask); hyperthread siblings (same package and core id in sysfs) count once."""
    if cpus is None:
        try:
            cpus = os.sched_getaffinity(0)
        except (AttributeError, OSError):
            return os.cpu_count() or 1
    cores = set()
    for cpu in sorted(cpus):
        try:
            topo = f"{sysfs}/cpu{cpu}/topology/"
            with open(topo + "physical_package_id", encoding="ascii") as f, \
                    open(topo + "core_id", encoding="ascii") as g:
                cores.add((f.read().strip(), g.read().strip()))
        except OSError:
            cores.add(("cpu", str(cpu)))
    return max(1, len(cores))


def default_threads() -> int:
    """``$DCSTUDIO_THREADS`` when it is a positive integer, else ``physical_cores()``."""
    try:
        n = int(os.environ.get("DCSTUDIO_THREADS", ""))
    except ValueError:
        n = 0
    return n if n > 0 else physical_cores()


def device_problem() -> str | None:
    """Why a package cannot run on this machine (``_lib.device_problem``): never, on the CPU."""
    return None
