"""The processor a profile was measured on, and the one line that says a plan's timings come
from another (issue 33: predictions made on an AMD EPYC were 30-64 % off on an Intel Xeon).

`Processor` is what the profile and the plan record (`profiler.processor.this_processor` probes
the live machine): the CPU's model name, its architecture, the ISA flags that change which
kernels run (a short sorted subset, `ISA_FLAGS`), torch's quantized engine and CPU capability,
the logical cores, and for a CUDA device the GPU's name. Its JSON form (in `profile.json` and
`plan.json`, both optional: files from before it was recorded have none)::

    "processor": {"name": "AMD EPYC 9R14", "architecture": "x86_64",
                  "flags": ["avx2", "avx512f", "fma"], "quantized_engine": "x86",
                  "capability": "AVX512", "cores": 2, "gpu": null}

Two processors differ (`differs`) when the model name, the ISA subset, the quantized engine or
the GPU differ; the capability follows the flags, and the core count is not compared (the
thread count a profile was timed with is in its device label, `profiler.threads`).

`machine_difference` is the one comparison every consumer of a plan's timings makes (`validate`
puts it in the report's notes and on stderr, `generate --plan`, `export` and `bench` print it):
a different processor, else (when asked) a different device label (another thread count). It
warns and never refuses: the plan still runs, and validating it elsewhere measures how far off
it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from polyplan.formats.errors import PolyplanError

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
_FIELDS = ("name", "architecture", "flags", "quantized_engine", "capability", "cores", "gpu")
_RERUN = "its timings may not hold; re-run polyplan profile here"


@dataclass(frozen=True)
class Processor:
    """Where timings were taken (module docstring): the CPU and, on CUDA, the GPU."""

    name: str
    architecture: str | None = None
    flags: tuple[str, ...] = ()  # sorted, a subset of ISA_FLAGS
    quantized_engine: str | None = None  # torch.backends.quantized.engine
    capability: str | None = None  # torch.backends.cpu.get_cpu_capability()
    cores: int | None = None  # logical cores
    gpu: str | None = None  # the CUDA device's name; None on CPU

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
        """Whether timings taken on one may not hold on the other (module docstring)."""
        return (self.name, self.flags, self.quantized_engine, self.gpu) != (other.name, other.flags, other.quantized_engine, other.gpu)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "architecture": self.architecture, "flags": list(self.flags),
                "quantized_engine": self.quantized_engine, "capability": self.capability, "cores": self.cores, "gpu": self.gpu}


def isa_flags(flags: Any) -> tuple[str, ...]:
    """The recorded subset of a processor's flags, sorted."""
    return tuple(sorted(ISA_FLAGS.intersection(flags)))


def processor_from_json(value: Any, where: str) -> Processor:
    """`Processor` from its JSON object; one `PolyplanError` line naming `where` and the field."""
    if not isinstance(value, dict):
        raise PolyplanError(f"{where}: must be a JSON object with 'name' (the CPU's model name)")
    unknown = sorted(set(value) - set(_FIELDS))
    if unknown:
        raise PolyplanError(f"{where}: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(_FIELDS))})")
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        raise PolyplanError(f"{where}.name: must be a non-empty string, got {name!r}")
    texts = {}
    for key in ("architecture", "quantized_engine", "capability", "gpu"):
        item = value.get(key)
        if item is not None and (not isinstance(item, str) or not item.strip()):
            raise PolyplanError(f"{where}.{key}: must be a non-empty string or null, got {item!r}")
        texts[key] = item
    flags = value.get("flags", [])
    if not isinstance(flags, list) or not all(isinstance(flag, str) and flag for flag in flags):
        raise PolyplanError(f"{where}.flags: must be a list of ISA flag names, got {flags!r}")
    cores = value.get("cores")
    if cores is not None and (isinstance(cores, bool) or not isinstance(cores, int) or cores < 1):
        raise PolyplanError(f"{where}.cores: must be an integer >= 1 or null, got {cores!r}")
    return Processor(name=name, flags=tuple(sorted(set(flags))), cores=cores, **texts)


def processor_labels(planned: Processor, here: Processor) -> tuple[str, str] | None:
    """The labels of `planned` (where timings were taken) and `here` when they differ, else
    None; two processors with the same label (a model name virtual machines share) are told
    apart by the flags only one of them has."""
    if not planned.differs(here):
        return None
    if planned.label != here.label:
        return planned.label, here.label
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
    """The one line on where a plan's timings were taken against where they are used now, or
    None: another processor when both are recorded (`processor_line`), else, when
    `here_device` is given, another device label (another thread count, or a plan from before
    processors were recorded: its label names the CPU model). A plan that records neither says
    nothing: there is nothing to compare."""
    if planned is not None and here is not None:
        line = processor_line(planned, here)
        if line is not None:
            return line
    if here_device is not None and planned_device and planned_device != here_device:
        return f"the plan was profiled on '{planned_device}' but this runs on '{here_device}'"
    return None
