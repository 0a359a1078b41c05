"""The processor a profile was measured on (`Processor`, probed by `profiler.processor.this_processor`),
and `machine_difference`, the one line every consumer of a plan's timings prints when they come
from another machine; it warns and never refuses (docs/profiling.md, "Timing health").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from polyplan.formats.checks import each, sorted_names, text, whole
from polyplan.formats.codec import NONE, spec

# The flags recorded: those that change which matmul / quantized kernels torch and llama.cpp run.
ISA_FLAGS = frozenset({
    # x86
    "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
    "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16",
    # ARM (/proc/cpuinfo "Features")
    "neon", "asimd", "asimdhp", "asimddp", "sve", "sve2", "i8mm", "bf16",
})
# The widest vector family a processor has (its label's first word), widest first.
_LEVELS = (("amx_tile", "amx"), ("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"), ("sve2", "sve2"),
           ("sve", "sve"), ("asimd", "neon"), ("neon", "neon"))
_RERUN = "its timings may not hold; re-run polyplan profile here"


@dataclass(frozen=True)
class Processor:
    """Where timings were taken: the CPU and, on CUDA, the GPU."""

    name: str = spec(text)
    architecture: str | None = spec(text, default=None)
    flags: tuple[str, ...] = spec(each(text), sorted_names, default=())  # sorted, a subset of ISA_FLAGS
    quantized_engine: str | None = spec(text, default=None)  # torch.backends.quantized.engine
    capability: str | None = spec(text, default=None)  # torch.backends.cpu.get_cpu_capability()
    cores: int | None = spec(whole(1), default=None)  # logical cores
    gpu: str | None = spec(text, default=None)  # the CUDA device's name; None on CPU
    generation: str | None = spec(text, default=None, omit=NONE)  # x86 "family 26 model 2", from /proc/cpuinfo

    @property
    def level(self) -> str:
        """The widest vector family ("amx", "avx512", "avx2", "neon", …), else the architecture."""
        present = set(self.flags)
        return next((name for flag, name in _LEVELS if flag in present), self.architecture or "unknown ISA")

    @property
    def label(self) -> str:
        """One short name for people: "AMD EPYC 9R14 (avx512, x86)" (the ISA family and the
        quantized engine), the GPU first on CUDA."""
        cpu = f"{self.name} ({self.level}, {self.quantized_engine or self.architecture or 'unknown engine'})"
        return cpu if self.gpu is None else f"{self.gpu} on {cpu}"

    def differs(self, other: Processor) -> bool:
        """Whether timings taken on one may not hold on the other (the capability follows the
        flags and the core count is in the device label, so neither decides)."""
        if (self.name, self.flags, self.quantized_engine, self.gpu) != (other.name, other.flags, other.quantized_engine, other.gpu):
            return True
        return None not in (self.generation, other.generation) and self.generation != other.generation


def isa_flags(flags: Any) -> tuple[str, ...]:
    """The recorded subset of a processor's flags, sorted."""
    return tuple(sorted(ISA_FLAGS.intersection(flags)))


def processor_labels(planned: Processor, here: Processor) -> tuple[str, str] | None:
    """The labels of `planned` (where timings were taken) and `here` when they differ, else
    None; two processors with the same label (a model name virtual machines share) are told
    apart by the flags only one of them has."""
    if not planned.differs(here):
        return None
    if planned.label != here.label:
        return planned.label, here.label
    if planned.flags == here.flags:  # the same name and flags: another generation
        return f"{planned.label} {planned.generation}", f"{here.label} {here.generation}"
    only_there = ", ".join(sorted(set(planned.flags) - set(here.flags)))
    only_here = ", ".join(sorted(set(here.flags) - set(planned.flags)))
    there = f"with {only_there}" if only_there else f"without {only_here}"
    yours = f"with {only_here}" if only_here else f"without {only_there}"
    return f"{planned.label} {there}", f"{here.label} {yours}"


def processor_line(planned: Processor, here: Processor) -> str | None:
    """"the plan was profiled on 'A' but this is 'B': its timings may not hold; …" when
    `planned` differs from `here`, else None."""
    labels = processor_labels(planned, here)
    return None if labels is None else f"the plan was profiled on '{labels[0]}' but this is '{labels[1]}': {_RERUN}"


def machine_difference(planned_device: str, planned: Processor | None, here_device: str | None, here: Processor | None) -> str | None:
    """The one line on where a plan's timings were taken against where they are used now, or None:
    another processor when both are recorded, else (with `here_device`) another device label."""
    if planned is not None and here is not None:
        line = processor_line(planned, here)
        if line is not None:
            return line
    if here_device is not None and planned_device and planned_device != here_device:
        return f"the plan was profiled on '{planned_device}' but this runs on '{here_device}'"
    return None
