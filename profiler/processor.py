"""The processor of this machine (`formats.processor.Processor`), probed where timings are taken.

The model name, flags and generation come from /proc/cpuinfo's first processor (x86: "model name",
"flags", "cpu family" and "model"; ARM: "Features", "CPU implementer" and "CPU part"), else
`platform.processor()`; the quantized engine and CPU capability from torch; the cores from
`os.cpu_count`; on a CUDA device, the GPU's name.
"""

from __future__ import annotations

import os
import platform

from polyplan.formats.processor import Processor, isa_flags, machine_difference


def _first_processor(path: str = "/proc/cpuinfo") -> dict[str, str]:
    """The first processor's block of `path`: each key's first value, up to the first blank line
    after it began ({} where unreadable)."""
    fields: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as stream:
            for line in stream:
                if not line.strip():
                    if fields:
                        break  # the first processor's block is done
                    continue
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        return {}
    return fields


def cpuinfo_fields(path: str = "/proc/cpuinfo", block: dict[str, str] | None = None) -> tuple[str | None, tuple[str, ...]]:
    """The first processor's model name and flags ((None, ()) where unreadable); `block`: its
    fields already read (`_first_processor`)."""
    fields = _first_processor(path) if block is None else block
    return fields.get("model name") or None, tuple((fields.get("flags") or fields.get("Features") or "").split())


def cpu_generation(path: str = "/proc/cpuinfo", block: dict[str, str] | None = None) -> str | None:
    """The first processor's generation: "family 26 model 2" (x86), "implementer 0x41 part
    0xd40" (ARM), None where unreadable or not given; `block` as in `cpuinfo_fields`."""
    fields = _first_processor(path) if block is None else block
    if fields.get("cpu family") and fields.get("model"):
        return f"family {fields['cpu family']} model {fields['model']}"
    if fields.get("CPU implementer") and fields.get("CPU part"):
        return f"implementer {fields['CPU implementer']} part {fields['CPU part']}"
    return None


def cpu_name() -> str | None:
    """The CPU's model name (/proc/cpuinfo, else `platform.processor()`), None where unknown."""
    return cpuinfo_fields()[0] or platform.processor() or None


def this_processor(device: str = "cpu") -> Processor:
    """This machine's processor, and the GPU's name when `device` is a CUDA device."""
    import torch

    block = _first_processor()
    name, flags = cpuinfo_fields(block=block)
    name = name or platform.processor() or platform.machine() or "unknown CPU"
    capability = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else None
    engine = torch.backends.quantized.engine or None
    gpu = torch.cuda.get_device_name(torch.device(device)) if str(device).startswith("cuda") else None
    return Processor(name=name, architecture=platform.machine() or None, flags=isa_flags(flags),
                     quantized_engine=engine, capability=capability or None, cores=os.cpu_count(), gpu=gpu,
                     generation=cpu_generation(block=block))


def plan_machine_line(plan, device: str = "cpu", *, here_device: str | None = None) -> str | None:
    """The line a consumer of `plan`'s timings (a `formats.plan.PlanFile`) prints when they
    were taken on another processor (`formats.processor.machine_difference`), else None;
    `here_device`: also compare the device labels (where the thread count is known)."""
    return machine_difference(plan.device, plan.processor, here_device, this_processor(device))
