"""What every benchmark script reports about the machine it ran on.

The scripts import it from their own folder (``sys.path`` holds a script's folder when it
runs), so nothing here is part of the installed package.
"""
from __future__ import annotations

import platform
import shutil
import subprocess
from importlib import metadata


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def package_version(package: str) -> str:
    """The installed version of ``package``, or ``"not installed"``."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def gpu_names() -> list:
    """The names of the visible NVIDIA GPUs (``nvidia-smi``); empty without it."""
    if not shutil.which("nvidia-smi"):
        return []
    done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                          capture_output=True, text=True, check=False)
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]
