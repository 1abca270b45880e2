"""The one table of device choices, and the one check of a choice.

Every job, the cluster helper and the command line take their device choices from here,
so a new device is added once and every error names the same allowed values.

Examples
--------
>>> check_choice("device", "gpu", DEVICES)
'gpu'
>>> check_choice("device", "tpu", DEVICES)
Traceback (most recent call last):
...
ValueError: unknown device 'tpu'; choose one of: auto, cpu, gpu
"""
from __future__ import annotations

#: Where a job's kernels run: ``"auto"`` decides by availability and expected time.
DEVICES = ("auto", "cpu", "gpu")
#: Long alignment can also split one pair's tiles over CPU and GPU workers at once.
LONG_DEVICES = DEVICES + ("both",)


def check_choice(name: str, value, allowed) -> str:
    """``value`` if it is one of ``allowed``; else a ValueError naming them all."""
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")
    return value
