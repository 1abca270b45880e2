"""Static SASS of a generated CUDA kernel, built for a GPU architecture on a machine without
a GPU: what the hot loop issues, to weigh a kernel change before a GPU is lent.

The kernel's text is rendered as the package renders it, compiled by numba-cuda (LTO-IR
when it links CUDA C++ helpers, as the DPX kernels do; PTX otherwise), linked for the
architecture by nvJitLink with the kernel's register cap, and disassembled by nvdisasm.
Nothing touches a CUDA driver.  For the shipped scan kernel (R20 G16, 27 codes, sm_90) the
instructions are those of the cubin in ``kernels/cuda/shipped/sm_90.zip``, line for line
(numba-cuda 0.30.4, NVRTC and nvJitLink 13.5, 2026-12-08).

Setup (once, on any Linux machine, in an environment of its own; no GPU needed)::

    pip install "numba-cuda[cu13]==0.30.*" nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump
    pip install --no-deps -e .

Use, from the repository root::

    python workflows/benchmarks/sass_static.py inter_task_dpx_scan rows=20 group=16 \\
        alphabet=27 threads=128 --cells 80
    python workflows/benchmarks/sass_static.py inter_task_dpx_scan rows=20 group=8 \\
        alphabet=27 threads=128 subjects=2 --cells 80

It prints the registers, the spill instructions, and the hot loop (the longest innermost
loop) by opcode; ``--cells``: the DP cells one trip of that loop computes
(for the scan kernel ``UNROLL`` columns x ``rows``, packed cells), for instructions a cell.
The counts are static: a profile on the GPU (``ncu_search.sh``) says how they issue.
"""
from __future__ import annotations

import argparse
import collections
import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: An instruction line of ``nvdisasm -c``: its address and text (predicate included).
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_BRANCH = re.compile(r"\bBRA(?:\.\w+)*\s+(?:`\()?(\.L_x_\d+)")
#: The pipes of the DPX instructions the score kernels are made of.
DPX = ("VIADDMNMX", "VIMNMX3", "VIMNMX", "VIADD.16x2")


@dataclass(frozen=True)
class Loop:
    """A loop of the disassembly: its label, first and last address, and its body's
    instructions by opcode (predicates left out)."""

    label: str
    start: int
    end: int
    opcodes: collections.Counter

    @property
    def size(self) -> int:
        return sum(self.opcodes.values())


def parse(sass: str) -> tuple[list[tuple[int, str]], dict[str, int]]:
    """Instructions ``(address, text)`` of ``nvdisasm -c`` output and each label's
    address (that of the instruction after it)."""
    instructions, labels, pending = [], {}, []
    for line in sass.splitlines():
        label = _LABEL.match(line)
        if label:
            pending.append(label.group(1))
            continue
        found = _INSTRUCTION.match(line)
        if found:
            address = int(found.group(1), 16)
            for name in pending:
                labels[name] = address
            pending = []
            instructions.append((address, found.group(2)))
    return instructions, labels


def opcode(text: str) -> str:
    """The opcode of an instruction's text, its predicate (``@P0``, ``@!UP1``) left out."""
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]


def loops(sass: str) -> list[Loop]:
    """Every loop of ``sass``, longest first: a predicated branch back to a label at or
    before it.  An unpredicated branch back is not one: ptxas ends the out-of-line blocks
    it places after a loop (the divergent paths of warp shuffles) by jumping back into
    the loop's middle.

    Examples
    --------
    >>> text = '''
    ...         /*0000*/                   MOV R1, c[0x0][0x28] ;
    ... .L_x_1:
    ...         /*0010*/                   VIADDMNMX.S16x2 R2, R2, R3, R4 ;
    ...         /*0020*/              @!P0 VIADDMNMX.S16x2 R5, R5, R3, R4 ;
    ...         /*0030*/                   ISETP.GE.AND P0, PT, R6, R7, PT ;
    ...         /*0040*/              @!P0 BRA `(.L_x_1) ;
    ...         /*0050*/                   EXIT ;'''
    >>> [(loop.label, loop.size, loop.opcodes["VIADDMNMX.S16x2"]) for loop in loops(text)]
    [('.L_x_1', 4, 2)]
    """
    instructions, labels = parse(sass)
    found = []
    for address, text in instructions:
        branch = _BRANCH.search(text)
        if (branch and text.startswith("@")
                and labels.get(branch.group(1), address + 1) <= address):
            start = labels[branch.group(1)]
            body = collections.Counter(opcode(t) for a, t in instructions
                                       if start <= a <= address)
            found.append(Loop(branch.group(1), start, address, body))
    return sorted(found, key=lambda loop: -loop.size)


def hot_loop(found: list[Loop]) -> Loop | None:
    """The longest innermost loop of ``found`` (one with no other loop inside it): a
    kernel's column loop, not the pass loop around it.

    Examples
    --------
    >>> outer = Loop(".L_x_1", 0x10, 0x90, collections.Counter(A=9))
    >>> inner = Loop(".L_x_2", 0x20, 0x60, collections.Counter(A=5))
    >>> other = Loop(".L_x_3", 0xa0, 0xb0, collections.Counter(A=2))
    >>> hot_loop([outer, inner, other]).label
    '.L_x_2'
    """
    innermost = [loop for loop in found
                 if not any(o is not loop and loop.start <= o.start and o.end <= loop.end
                            for o in found)]
    return max(innermost, key=lambda loop: loop.size, default=None)


def spills(sass: str, within: Loop | None = None) -> int:
    """Local-memory spill and refill instructions (``STL``/``LDL``) of ``sass`` (``within``:
    of that loop's body only)."""
    return sum(opcode(text).split(".")[0] in ("STL", "LDL")
               for address, text in parse(sass)[0]
               if within is None or within.start <= address <= within.end)


def build_cubin(family: str, shape: dict, arch: str = "sm_90") -> tuple[bytes, str]:
    """A cubin of ``family``'s kernel of ``shape`` for ``arch``, and the kernel's name."""
    from cuda.core import Linker, LinkerOptions, ObjectCode, Program, ProgramOptions
    from numba import cuda
    from numba.core import sigutils

    module = importlib.import_module(f"swdask.kernels.cuda.{family}")
    rendered = module.render(**shape)
    namespace = dict(rendered.namespace, __name__=f"swdask_kernel_{rendered.name}")
    exec(compile(rendered.source, f"{rendered.name}.py", "exec"), namespace)
    argtypes, _ = sigutils.normalize_signature(module.signature(**shape))
    digits = arch.removeprefix("sm_")  # sm_90 -> (9, 0), sm_100 -> (10, 0)
    cc = (int(digits[:-1]), int(digits[-1]))
    registers = rendered.options.get("max_registers")
    options = LinkerOptions(arch=arch, max_register_count=registers,
                            link_time_optimization=bool(rendered.link))
    if rendered.link:
        code, _ = cuda.compile(namespace["kernel"], argtypes, device=False, cc=cc,
                               output="ltoir", abi="numba")
        objects = [ObjectCode.from_ltoir(code)]
        objects += [Program(source, "c++", ProgramOptions(arch=arch, link_time_optimization=True))
                    .compile("ltoir") for source in rendered.link]
    else:
        code, _ = cuda.compile(namespace["kernel"], argtypes, device=False, cc=cc,
                               output="ptx", abi="numba")
        objects = [ObjectCode.from_ptx(code)]
    return bytes(Linker(*objects, options=options).link("cubin").code), rendered.name


def nvdisasm() -> str:
    """The nvdisasm of the ``nvidia-cuda-nvdisasm`` wheel, else the one on the path."""
    try:
        import nvidia

        for folder in nvidia.__path__:
            for found in sorted(Path(folder).glob("cu*/bin/nvdisasm")):
                return str(found)
    except ImportError:
        pass
    found = shutil.which("nvdisasm")
    if found is None:
        raise SystemExit("nvdisasm not found: pip install nvidia-cuda-nvdisasm")
    return found


def registers(cubin: Path) -> str:
    """The kernel's resource line (``REG:`` ...) by cuobjdump, where there is one."""
    tool = Path(nvdisasm()).with_name("cuobjdump")
    if not tool.is_file():
        return "registers: (cuobjdump not found: pip install nvidia-cuda-cuobjdump)"
    out = subprocess.run([str(tool), "-res-usage", str(cubin)], capture_output=True,
                         text=True).stdout
    return next((line.strip() for line in out.splitlines() if "REG:" in line), out.strip())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("family", help="a generated kernel family (kernels/cuda/<family>.py)")
    parser.add_argument("shape", nargs="*", help="render arguments as name=value")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--cells", type=int, default=None,
                        help="DP cells a trip of the hot loop computes (instructions a cell)")
    parser.add_argument("--out", type=Path, default=None, help="also keep the cubin here")
    args = parser.parse_args(argv)
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)  # the real target, not the simulator
    shape = {}
    for item in args.shape:
        name, _, value = item.partition("=")
        shape[name] = int(value) if value.lstrip("-").isdigit() else value
    cubin, name = build_cubin(args.family, shape, args.arch)
    with tempfile.TemporaryDirectory() as scratch:
        path = args.out or Path(scratch) / f"{name}.cubin"
        path.write_bytes(cubin)
        sass = subprocess.run([nvdisasm(), "-c", str(path)], capture_output=True, text=True,
                              check=True).stdout
        print(f"{name} for {args.arch}: {len(cubin):,} bytes; {registers(path)}")
    hot = hot_loop(loops(sass))
    print(f"spill instructions (STL/LDL): {spills(sass)}"
          + (f", {spills(sass, hot)} of them in the hot loop" if hot else ""))
    if hot is None:
        print("no loop found")
        return 0
    dpx = sum(count for op, count in hot.opcodes.items() if op.startswith(DPX))
    print(f"hot loop {hot.label} ({hot.start:#x}-{hot.end:#x}): {hot.size} instructions, "
          f"{dpx} of them DPX instructions and 16-bit pair adds"
          + (f"; {hot.size / args.cells:.2f} a cell, {dpx / args.cells:.2f} DPX"
             if args.cells else ""))
    print("\n| opcode | count |\n|---|---:|")
    for op, count in hot.opcodes.most_common():
        print(f"| {op} | {count} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
