"""Register-pool check of the compiled Hopper backward kernels (needs cuobjdump, no GPU).

setmaxnreg moves registers inside the CTA's pool, which is what the CTA got at launch: the
kernel's register count (ptxas -v "Used N registers", cuobjdump -res-usage REG) times its
threads. A warpgroup's setmaxnreg.inc (SASS USETMAXREG.TRY_ALLOC, retried until it succeeds)
waits until the others' setmaxnreg.dec (USETMAXREG.DEALLOC) gave enough back; if the warpgroups'
targets add up to more than the pool, a consumer warpgroup waits forever and the CTA hangs
before its first step (the variant backward kernels did: 32 + 2 x 240 = 512 > 3 x 168 = 504).

For every function of the given objects with setmaxnreg: one producer warpgroup at the DEALLOC
value and (threads / 128 - 1) consumer warpgroups at the TRY_ALLOC value must fit
threads / 128 x REG. The backward main kernels run 384 threads (3 warpgroups, config.cuh).

Run: python3 tests/gpu/cuda/bwd_setmaxnreg_check.py hd64.o hd128.o hd256.o  (exit 0 = all fit)
Build the objects with the compile line of docs/hopper-kernels.md
(nvcc ... -c cuda/hopper/bwd/hd128.cu).
"""

import re
import subprocess
import sys

WARPGROUPS = 3  # the backward main kernels: one producer and two consumer warpgroups


def functions_of(path):
    """{mangled name: (REG, [DEALLOC values], [TRY_ALLOC values])}."""
    res = subprocess.run(
        ["cuobjdump", "-res-usage", path], capture_output=True, text=True, check=True
    ).stdout
    regs = {}
    name = None
    for line in res.splitlines():
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            name = m.group(1)
            continue
        m = re.search(r"REG:(\d+)", line)
        if m and name:
            regs[name] = int(m.group(1))
            name = None
    sass = subprocess.run(
        ["cuobjdump", "-sass", path], capture_output=True, text=True, check=True
    ).stdout
    out = {}
    name = None
    for line in sass.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name = m.group(1)
            out[name] = (regs.get(name, 0), [], [])
            continue
        m = re.search(r"USETMAXREG\.(DEALLOC|TRY_ALLOC)\S*\s+(?:UP\d+,\s*)?(0x[0-9a-f]+|\d+)", line)
        if m and name:
            (out[name][1] if m.group(1) == "DEALLOC" else out[name][2]).append(int(m.group(2), 0))
    return out


def main(paths):
    bad = 0
    n = 0
    for path in paths:
        for name, (reg, dec, inc) in functions_of(path).items():
            if not dec and not inc:
                continue
            n += 1
            pool = WARPGROUPS * reg
            need = max(dec, default=reg) + (WARPGROUPS - 1) * max(inc, default=reg)
            ok = need <= pool and reg > 0
            bad += not ok
            if not ok or "-v" in sys.argv:
                print(
                    f"{'ok  ' if ok else 'FAIL'} {name}: entry {reg} x {WARPGROUPS} = {pool}, "
                    f"setmaxnreg dec {dec} inc {inc} -> {need}"
                )
    print(f"{n} kernels with setmaxnreg, {bad} over their register pool")
    return 1 if bad or n == 0 else 0


if __name__ == "__main__":
    sys.exit(main([a for a in sys.argv[1:] if a != "-v"]))
