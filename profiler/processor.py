"""The processor of this machine (`formats.processor.Processor`), probed where timings are taken.

The model name and flags come from /proc/cpuinfo (Linux: "model name" and "flags" on x86,
"Features" on ARM), else `platform.processor()` with no flags; the quantized engine and CPU
capability from torch; the logical cores from `os.cpu_count`; on a CUDA device, the GPU's name;
the generation from /proc/cpuinfo's "cpu family" and "model" (x86) or "CPU implementer" and
"CPU part" (ARM).
`plan_machine_line` is what a consumer of a plan's timings prints (`formats.processor`).
"""

from __future__ import annotations

import os
import platform

from polyplan.formats.processor import Processor, isa_flags, machine_difference


def cpuinfo_fields(path: str = "/proc/cpuinfo") -> tuple[str | None, tuple[str, ...]]:
    """The first processor's model name and flags in `path` ((None, ()) where unreadable)."""
    name, flags = None, ()
    try:
        with open(path, encoding="utf-8") as stream:
            for line in stream:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and name is None:
                    name = value.strip() or None
                elif key in ("flags", "Features") and not flags:
                    flags = tuple(value.split())
                elif not line.strip() and (name or flags):
                    break  # the first processor's block is done
    except OSError:
        return None, ()
    return name, flags


def cpu_generation(path: str = "/proc/cpuinfo") -> str | None:
    """The first processor's generation: "family 26 model 2" (x86), "implementer 0x41 part
    0xd40" (ARM), None where unreadable or not given."""
    found: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as stream:
            for line in stream:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key in ("cpu family", "model", "CPU implementer", "CPU part") and key not in found:
                    found[key] = value
                elif not line.strip() and found:
                    break  # the first processor's block is done
    except OSError:
        return None
    if "cpu family" in found and "model" in found:
        return f"family {found['cpu family']} model {found['model']}"
    if "CPU implementer" in found and "CPU part" in found:
        return f"implementer {found['CPU implementer']} part {found['CPU part']}"
    return None


def cpu_name() -> str | None:
    """The CPU's model name (/proc/cpuinfo, else `platform.processor()`), None where unknown."""
    return cpuinfo_fields()[0] or platform.processor() or None


def this_processor(device: str = "cpu") -> Processor:
    """This machine's processor, and the GPU's name when `device` is a CUDA device."""
    import torch

    name, flags = cpuinfo_fields()
    name = name or platform.processor() or platform.machine() or "unknown CPU"
    capability = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else None
    engine = torch.backends.quantized.engine or None
    gpu = torch.cuda.get_device_name(torch.device(device)) if str(device).startswith("cuda") else None
    return Processor(name=name, architecture=platform.machine() or None, flags=isa_flags(flags),
                     quantized_engine=engine, capability=capability or None, cores=os.cpu_count(), gpu=gpu,
                     generation=cpu_generation())


def plan_machine_line(plan, device: str = "cpu", *, here_device: str | None = None) -> str | None:
    """The line a consumer of `plan`'s timings (a `formats.plan.PlanFile`) prints when they
    were taken on another processor (`formats.processor.machine_difference`), else None;
    `here_device`: also compare the device labels (where the thread count is known)."""
    return machine_difference(plan.device, plan.processor, here_device, this_processor(device))
