"""Side-by-side attention benchmark on one GPU.

Times ``jax_fa4.attention`` beside cuDNN (``jax.nn.dot_product_attention(implementation="cudnn")``),
FlashAttention-3 (the ``flash-attn3-jax`` wheel, head dim 128 kernels only), FlashAttention-4's
kernels through JAX (``fa4jax``: the ``fa4-jax`` package's ``flash_attn``) and plain XLA
(``jax.nn.dot_product_attention(implementation="xla")``), all in one process, on the
FlashAttention-3 grid: bf16, 16k tokens per batch (batch = 16384 // seq), hidden 2048
(heads = 2048 // head_dim), head dims 64/128/256, seq 512..16384, causal and not, forward and
backward. ``--cell D,SEQ,BATCH,HEADS[/HEADS_KV],causal|full`` adds a cell beyond the grid (GQA
when HEADS_KV < HEADS: k and v carry HEADS_KV heads); ``--beyond-grid`` adds the rows the
backward issue names: GQA 32 / 8 heads at 8k (batch 2), causal and not, batch 5 x 3,000 causal
and one 65,536-token causal sequence, all at head dim 128; ``--no-grid`` runs those alone.

``jax_fa4_det`` (opt-in, not in the default ``--impls``) is ``jax_fa4.attention(...,
deterministic=True)``: the same forward, and the backward with its dQ adds ordered for bitwise
reproducible gradients; its backward column next to jax_fa4's gives the cost of that mode.

FLOPs are counted as FlashAttention does: forward 4*b*h*s*s*d, halved when causal; backward 2.5x
the forward count. A cell's TFLOP/s is that count divided by the measured time per call.

Timing. Each measurement compiles one ``jax.jit`` function that runs a chain of N calls in which
every call's output is the next call's query (``q = attention(q, k, v)``), so the calls are
serialised by a true data dependency and the host's launch overhead is paid once per chain, not per
call. N is chosen per cell so that a chain holds about ``--chain-flops`` forward FLOPs (at least 2
calls, at most 32). The chain is run untimed for ``--warmup-seconds`` (at least once; a compile
leaves the GPU idle and its clocks high for the first milliseconds after), then ``--repeats`` times
with ``block_until_ready``; the median is taken. With ``--rounds R`` each cell's fast
implementations are measured R times in a row, the order reversed every other round, and the record
holds the median of the rounds (and each round's figure). The backward chain is the same chain where
each step is ``jax.vjp`` of the call plus the pullback of a fixed random cotangent (every step's dq,
dk and dv are outputs of the jit, so no part of the backward can be dropped as dead code); backward
time per call = (fwd+bwd chain - forward chain) / N.

Any implementation that fails in a cell (unsupported shape or head dim, out of memory,
NotImplementedError for a backward that does not exist yet, missing package) records null for that
cell, prints a one-line reason and the run goes on. Results are rewritten to ``--out`` after every
cell, so an interrupted run still leaves its measured cells behind. Cells of the fast
implementations run first and the slow XLA reference last, so that ``--max-seconds`` drops the
least important cells when time runs short.

Usage (GPU):  python benchmarks/bench_attention.py --out results.json
Usage (CPU smoke test, seconds):  python benchmarks/bench_attention.py --smoke --impls jax_fa4,xla
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# The XLA reference materialises seq x seq scores; give the allocator room for it (the user's own
# setting wins). Must happen before jax is imported.
os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.90")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ratios import ratio_text  # noqa: E402

ALL_IMPLS = ("jax_fa4", "jax_fa4_det", "cudnn", "fa3", "fa4jax", "xla")
# The peers the "jax_fa4/best peer" column takes the best of.
PEER_IMPLS = ("cudnn", "fa3", "fa4jax")
# --impls default: all but jax_fa4_det (its forward is jax_fa4's; ask for it to time the
# deterministic backward).
DEFAULT_IMPLS = tuple(i for i in ALL_IMPLS if i != "jax_fa4_det")
# Implementations timed in the first pass; "xla" (slow, reference only) runs after all of them.
SLOW_IMPLS = ("xla",)
# The slow reference runs ~5x slower, so its chains hold 5x fewer FLOPs (shorter compiles, same
# chain duration): a chain of the fast implementations lasts a few ms at ~500 TFLOP/s.
SLOW_CHAIN_FACTOR = 0.2
FA3_HEAD_DIMS = (128,)
MAX_CHAIN = 32
MIN_CHAIN = 2

AttnFn = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


# ----------------------------------------------------------------------------------------------
# Environment and versions
# ----------------------------------------------------------------------------------------------


def _nvidia_smi() -> tuple[str | None, str | None]:
    """(GPU name, driver version) from nvidia-smi, or (None, None) when it is unavailable."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    first = out.strip().splitlines()[0] if out.strip() else ""
    parts = [p.strip() for p in first.split(",")]
    if len(parts) >= 2:
        return parts[0] or None, parts[1] or None
    return None, None


def _format_cudnn(v: int) -> str:
    """cuDNN's integer version as 'major.minor.patch'.

    cuDNN 9 encodes it as M*10000 + m*100 + p, cuDNN 8 as M*1000 + m*100 + p.
    """
    if v >= 10000:
        return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"
    return f"{v // 1000}.{(v % 1000) // 100}.{v % 100}"


def _cudnn_version() -> str | None:
    """The cuDNN version that jax's CUDA plugin loaded, or None (no plugin, CPU-only jax, ...)."""
    try:
        from jax._src.lib import cuda_versions  # type: ignore[attr-defined]
    except Exception:
        return None
    if cuda_versions is None:
        return None
    try:
        return _format_cudnn(int(cuda_versions.cudnn_get_version()))
    except Exception:
        return None


def environment() -> dict[str, Any]:
    """GPU, driver, jax, jaxlib and cuDNN versions plus the date, as the JSON header."""
    gpu, driver = _nvidia_smi()
    if gpu is None:
        try:
            gpu = jax.devices()[0].device_kind
        except Exception:
            gpu = None
    try:
        import jaxlib

        jaxlib_version: str | None = jaxlib.__version__
    except Exception:
        jaxlib_version = None
    return {
        "gpu": gpu,
        "driver": driver,
        "jax": jax.__version__,
        "jaxlib": jaxlib_version,
        "cudnn": _cudnn_version(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


# ----------------------------------------------------------------------------------------------
# Implementations
# ----------------------------------------------------------------------------------------------


def make_impl(name: str, causal: bool, head_dim: int) -> AttnFn:
    """The attention function of one implementation; raises (with a reason) if it cannot run."""
    if name in ("jax_fa4", "jax_fa4_det"):
        import jax_fa4

        det = name == "jax_fa4_det"

        def fa4(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            return jax_fa4.attention(q, k, v, causal=causal, deterministic=det)

        return fa4
    if name in ("cudnn", "xla"):

        def nn(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            return jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation=name)

        return nn
    if name == "fa3":
        if head_dim not in FA3_HEAD_DIMS:
            raise _Skip(f"the flash-attn3-jax wheel ships head dim {FA3_HEAD_DIMS} kernels only")
        from flash_attn3_jax import flash_mha

        def fa3(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            return flash_mha(q, k, v, is_causal=causal)

        return fa3
    if name == "fa4jax":
        from fa4_jax import flash_attn

        def fa4jax(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            return flash_attn(q, k, v, causal=causal)

        return fa4jax
    raise ValueError(f"unknown implementation {name!r}; known: {', '.join(ALL_IMPLS)}")


class _Skip(Exception):
    """A cell that is not attempted, with the reason as the message."""


# ----------------------------------------------------------------------------------------------
# Chains and timing
# ----------------------------------------------------------------------------------------------


def fwd_flops(batch: int, heads: int, seq: int, head_dim: int, causal: bool) -> float:
    """FlashAttention's forward FLOP count: 4*b*h*s*s*d, halved when causal."""
    f = 4.0 * batch * heads * seq * seq * head_dim
    return f / 2 if causal else f


def chain_length(flops_per_call: float, chain_flops: float) -> int:
    """Calls per chain so that the chain holds about chain_flops forward FLOPs."""
    return max(MIN_CHAIN, min(MAX_CHAIN, math.ceil(chain_flops / flops_per_call)))


def fwd_chain(attn: AttnFn, n: int) -> Callable[..., jax.Array]:
    """n forward calls, each call's output feeding the next call's q."""

    def run(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        for _ in range(n):
            q = attn(q, k, v).astype(q.dtype)
        return q

    return run


def fwd_bwd_chain(attn: AttnFn, n: int) -> Callable[..., Any]:
    """n (forward + backward) steps: the forward's output is the next step's q, exactly as in
    fwd_chain; every step's (dq, dk, dv) is returned so that none of the backward is dead code."""

    def run(q: jax.Array, k: jax.Array, v: jax.Array, do: jax.Array) -> Any:
        grads = []
        for _ in range(n):
            o, pullback = jax.vjp(attn, q, k, v)
            grads.append(pullback(do.astype(o.dtype)))
            q = o.astype(q.dtype)
        return q, grads

    return run


def time_compiled(
    fn: Callable[..., Any], args: Sequence[jax.Array], repeats: int, warmup_seconds: float = 0.0
) -> float:
    """Median wall time of fn(*args) over `repeats` runs, in seconds, after untimed warm-up runs:
    at least one, and more until `warmup_seconds` have passed. A compile leaves the GPU idle for
    seconds and its clocks run high for the first few milliseconds of work after that; the
    warm-up lets every implementation be timed in the steady state a training loop sees."""
    t_end = time.perf_counter() + warmup_seconds
    jax.block_until_ready(fn(*args))
    while time.perf_counter() < t_end:
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn(*args)
        jax.block_until_ready(out)
        times.append(time.perf_counter() - t0)
        del out
    return statistics.median(times)


def compile_fn(fn: Callable[..., Any], args: Sequence[jax.Array]) -> Callable[..., Any]:
    """Ahead-of-time compile, so that failures surface here and compile time stays out of timing."""
    return jax.jit(fn).lower(*args).compile()


def matmul_tflops(n: int = 8192, chain: int = 10, repeats: int = 5) -> float:
    """bf16 n^3 matmul chain TFLOP/s: the practical tensor-core ceiling of this GPU, this run."""
    ka, kb = jax.random.split(jax.random.key(1))
    a = jax.random.normal(ka, (n, n), jnp.float32).astype(jnp.bfloat16)
    b = (jax.random.normal(kb, (n, n), jnp.float32) / math.sqrt(n)).astype(jnp.bfloat16)

    def run(x: jax.Array, w: jax.Array) -> jax.Array:
        for _ in range(chain):
            x = x @ w  # w is scaled so that x keeps unit magnitude: random data, no overflow
        return x

    f = compile_fn(run, (a, b))
    return 2.0 * n**3 * chain / time_compiled(f, (a, b), repeats) / 1e12


def short_reason(e: BaseException) -> str:
    """One line saying why a cell failed."""
    msg = str(e).strip().splitlines()
    text = msg[0] if msg else ""
    for line in msg:  # out-of-memory errors put the useful part on their first line already
        if "RESOURCE_EXHAUSTED" in line or "Out of memory" in line:
            text = line
            break
    text = text if len(text) <= 200 else text[:197] + "..."
    return f"{type(e).__name__}: {text}"


# ----------------------------------------------------------------------------------------------
# Grid
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One point of the grid."""

    head_dim: int
    seq: int
    causal: bool
    batch: int
    heads: int
    heads_kv: int = 0  # k and v heads (0: as many as q; fewer: GQA)
    beyond: bool = False  # a --cell / --beyond-grid row, not a point of the grid

    @property
    def kv_heads(self) -> int:
        return self.heads_kv or self.heads


@dataclass
class Settings:
    """Run-wide knobs."""

    dtype: Any
    repeats: int
    warmup_seconds: float  # untimed runs of each compiled chain before its timed ones
    chain_flops: float
    do_bwd: bool
    deadline: float  # time.perf_counter() value after which no new cell starts
    verbose: bool


def make_inputs(cell: Cell, dtype: Any, seed: int = 0) -> tuple[jax.Array, ...]:
    """Random q, k, v and cotangent, standard normal, in the benchmark's dtype: q and the
    cotangent [batch, seq, heads, head_dim], k and v [batch, seq, kv_heads, head_dim]."""
    q_shape = (cell.batch, cell.seq, cell.heads, cell.head_dim)
    kv_shape = (cell.batch, cell.seq, cell.kv_heads, cell.head_dim)
    keys = jax.random.split(jax.random.key(seed), 4)
    shapes = (q_shape, kv_shape, kv_shape, q_shape)
    pairs = zip(keys, shapes, strict=True)
    return tuple(jax.random.normal(kk, sh, jnp.float32).astype(dtype) for kk, sh in pairs)


def measure(impl: str, cell: Cell, st: Settings) -> tuple[float | None, float | None, str]:
    """(fwd TFLOP/s, bwd TFLOP/s, note) of one implementation in one cell (None: not measured)."""
    if time.perf_counter() > st.deadline:
        return None, None, "skipped: --max-seconds budget spent"
    try:
        attn = make_impl(impl, cell.causal, cell.head_dim)
    except _Skip as e:
        return None, None, f"skipped: {e}"
    except Exception as e:
        return None, None, f"unavailable: {short_reason(e)}"

    flops = fwd_flops(cell.batch, cell.heads, cell.seq, cell.head_dim, cell.causal)
    n = chain_length(flops, st.chain_flops * (SLOW_CHAIN_FACTOR if impl in SLOW_IMPLS else 1.0))
    q, k, v, do = make_inputs(cell, st.dtype)
    notes = [f"chain {n}"]

    t_fwd: float | None = None
    try:
        t0 = time.perf_counter()
        f = compile_fn(fwd_chain(attn, n), (q, k, v))
        t_compile = time.perf_counter() - t0
        t_fwd = time_compiled(f, (q, k, v), st.repeats, st.warmup_seconds) / n
        del f
        notes.append(f"fwd {t_fwd * 1e3:.3f} ms (compile {t_compile:.1f} s)")
    except Exception as e:
        if st.verbose:
            traceback.print_exc()
        return None, None, f"fwd failed: {short_reason(e)}"

    fwd_tf = flops / t_fwd / 1e12
    bwd_tf: float | None = None
    if not st.do_bwd:
        pass
    elif time.perf_counter() > st.deadline:
        notes.append("bwd skipped: --max-seconds budget spent")
    else:
        try:
            t0 = time.perf_counter()
            g = compile_fn(fwd_bwd_chain(attn, n), (q, k, v, do))
            t_compile = time.perf_counter() - t0
            t_fb = time_compiled(g, (q, k, v, do), st.repeats, st.warmup_seconds) / n
            del g
            t_bwd = t_fb - t_fwd
            if t_bwd > 0:
                bwd_tf = 2.5 * flops / t_bwd / 1e12
                notes.append(f"bwd {t_bwd * 1e3:.3f} ms (compile {t_compile:.1f} s)")
            else:
                notes.append(f"bwd not measurable: fwd+bwd {t_fb * 1e3:.3f} ms <= fwd")
        except Exception as e:
            if st.verbose:
                traceback.print_exc()
            notes.append(f"bwd failed: {short_reason(e)}")
    del q, k, v, do
    return fwd_tf, bwd_tf, "; ".join(notes)


def grid(
    head_dims: Sequence[int], seqs: Sequence[int], causals: Sequence[bool], tokens: int, hidden: int
) -> list[Cell]:
    """Cells in (head_dim, causal, seq) order; batch and heads from the token and hidden totals."""
    cells = []
    for d in head_dims:
        for c in causals:
            for s in seqs:
                cells.append(Cell(d, s, c, batch=max(1, tokens // s), heads=max(1, hidden // d)))
    return cells


# ----------------------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------------------


def _median(xs: Sequence[float | None]) -> float | None:
    """Median of the measured values (None where none was measured)."""
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def _round(x: float | None) -> float | None:
    """Four significant digits (enough for TFLOP/s, and tiny CPU smoke figures stay non-zero)."""
    return None if x is None else float(f"{x:.4g}")


def _fmt_tf(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 1:
        return f"{x:.1f}"
    return f"{x:.3g}"


def format_ratio(r: float) -> str:
    """A jax_fa4/cudnn ratio for the markdown tables: ratio_text, bold below 1.0."""
    text = ratio_text(r)
    return f"**{text}x**" if r < 1.0 else f"{text}x"


def _seq_label(r: dict[str, Any]) -> str:
    """The seq column: the length, and for a row beyond the grid its batch and heads."""
    if not r.get("beyond"):
        return str(r["seq"])
    heads = f"{r['heads']}/{r.get('heads_kv', r['heads'])}"
    return f"{r['seq']} (batch {r['batch']}, heads {heads})"


def table(records: list[dict[str, Any]], impls: Sequence[str], key: str) -> str:
    """A markdown table of `key` ("fwd_tflops" or "bwd_tflops") per cell, with jax_fa4/cudnn and,
    with more than one peer, jax_fa4 over the best of them (PEER_IMPLS)."""
    by_cell: dict[tuple[int, bool, int, str], dict[str, float | None]] = {}
    for r in records:
        cell = (r["head_dim"], r["causal"], r["seq"], _seq_label(r))
        by_cell.setdefault(cell, {})[r["impl"]] = r[key]
    ratio = "jax_fa4" in impls and "cudnn" in impls
    peers = [i for i in impls if i in PEER_IMPLS]
    best = "jax_fa4" in impls and len(peers) > 1
    head = ["head dim", "causal", "seq", *impls]
    head += (["jax_fa4/cudnn"] if ratio else []) + (["jax_fa4/best peer"] if best else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (d, c, _, label), vals in sorted(by_cell.items()):
        row = [str(d), "yes" if c else "no", label] + [_fmt_tf(vals.get(i)) for i in impls]
        a = vals.get("jax_fa4")
        if ratio:
            b = vals.get("cudnn")
            row.append(format_ratio(a / b) if a is not None and b else "-")
        if best:
            got = [x for x in (vals.get(i) for i in peers) if x]
            row.append(format_ratio(a / max(got)) if a is not None and got else "-")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


# The rows beyond the grid that the backward issue measures (head dim 128): GQA 32 / 8 heads at
# 8k, causal and not; batch 5 x 3,000 causal; one 65,536-token causal sequence.
BEYOND_GRID = (
    "128,8192,2,32/8,causal",
    "128,8192,2,32/8,full",
    "128,3000,5,16,causal",
    "128,65536,1,16,causal",
)


def parse_cell(text: str) -> Cell:
    """A --cell spec "D,SEQ,BATCH,HEADS[/HEADS_KV],causal|full" as a Cell beyond the grid;
    raises ValueError naming what is wrong."""
    parts = [t.strip() for t in text.split(",")]
    if len(parts) != 5:
        raise ValueError(f"--cell {text!r}: expected D,SEQ,BATCH,HEADS[/HEADS_KV],causal|full")
    hq_text, _, hkv_text = parts[3].partition("/")
    mode = parts[4].lower()
    try:
        d, seq, batch, hq = (int(x) for x in (*parts[:3], hq_text))
        hkv = int(hkv_text) if hkv_text else hq
    except ValueError:
        raise ValueError(f"--cell {text!r}: D, SEQ, BATCH and the heads must be integers") from None
    if mode not in ("causal", "full"):
        raise ValueError(f"--cell {text!r}: the last field is 'causal' or 'full', got {mode!r}")
    if min(d, seq, batch, hq, hkv) < 1 or hq % hkv:
        raise ValueError(
            f"--cell {text!r}: sizes must be positive and HEADS a multiple of HEADS_KV"
        )
    return Cell(
        d,
        seq,
        mode == "causal",
        batch=batch,
        heads=hq,
        heads_kv=hkv if hkv != hq else 0,
        beyond=True,
    )


def write_json(path: str | None, env: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """Write the header and records, atomically (rename), so a killed run leaves valid JSON."""
    if not path:
        return
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({**env, "records": records}, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------


def _int_list(text: str) -> list[int]:
    out = []
    for t in text.split(","):
        t = t.strip().lower()
        if not t:
            continue
        mult = 1
        if t.endswith("k"):
            t, mult = t[:-1], 1024
        out.append(int(t) * mult)
    return out


def add_cell_arguments(p: argparse.ArgumentParser) -> None:
    """--impls, --head-dim, --seq and --causal: one cell of the grid, for the profiling tools
    (``profile_chain.py``, ``clock_probe.py``)."""
    p.add_argument("--impls", default="jax_fa4,cudnn", help=f"comma-separated, of {ALL_IMPLS}")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--causal", action="store_true")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "--impls",
        default=",".join(DEFAULT_IMPLS),
        help=f"comma-separated subset of {','.join(ALL_IMPLS)} (default: all but jax_fa4_det)",
    )
    p.add_argument("--head-dims", default=None, help="comma-separated (default 64,128,256)")
    p.add_argument(
        "--seqs", default=None, help="comma-separated, 'k' = 1024 (default 512,1k,2k,4k,8k,16k)"
    )
    p.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    p.add_argument(
        "--cell",
        action="append",
        default=[],
        help="a cell beyond the grid, D,SEQ,BATCH,HEADS[/HEADS_KV],causal|full (repeatable)",
    )
    p.add_argument(
        "--beyond-grid",
        action="store_true",
        help="add the backward issue's rows beyond the grid (BEYOND_GRID: GQA 32/8 at 8k, "
        "batch 5 x 3,000, one 65,536-token sequence; head dim 128)",
    )
    p.add_argument("--no-grid", action="store_true", help="only the --cell / --beyond-grid rows")
    p.add_argument("--no-bwd", action="store_true", help="forward only")
    p.add_argument("--out", default=None, help="JSON output path (rewritten after every cell)")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes that run on a CPU in seconds (checks the script, not speed)",
    )
    p.add_argument("--tokens", type=int, default=None, help="tokens per batch (default 16384)")
    p.add_argument("--hidden", type=int, default=None, help="heads*head_dim (default 2048)")
    p.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per chain (default 5)")
    p.add_argument(
        "--warmup-seconds",
        type=float,
        default=0.3,
        help="untimed runs of each compiled chain for this long before timing it, so that every "
        "implementation is timed at steady-state GPU clocks (default 0.3; --smoke: 0)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure each cell's fast implementations this many times in a row, the order "
        "reversed every other round; a record holds the median (and every round's figure)",
    )
    p.add_argument(
        "--chain-flops",
        type=float,
        default=None,
        help="forward FLOPs per chain; sets the chain length (default 2e12)",
    )
    p.add_argument(
        "--max-seconds",
        type=float,
        default=330.0,
        help="start no new cell after this many seconds (default 330); 0 = no limit",
    )
    p.add_argument(
        "--cell-timeout",
        type=float,
        default=180.0,
        help="a cell (one impl, fwd and bwd) running longer than this is taken for a hang: the "
        "tables so far are printed and the process exits with status 3 (default 180; 0 = off)",
    )
    p.add_argument(
        "--no-matmul", action="store_true", help="skip the bf16 8192^3 matmul ceiling line"
    )
    p.add_argument("--verbose", action="store_true", help="print tracebacks of failures")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    t_start = time.perf_counter()
    asked = [i.strip() for i in args.impls.split(",") if i.strip()]
    unknown = [i for i in asked if i not in ALL_IMPLS]
    if unknown or not asked:
        print(f"bad --impls {args.impls!r}; known: {', '.join(ALL_IMPLS)}", file=sys.stderr)
        return 2
    impls = [i for i in ALL_IMPLS if i in asked]  # canonical order: columns and records
    if args.rounds < 1:
        print(f"bad --rounds {args.rounds}: must be at least 1", file=sys.stderr)
        return 2

    if args.smoke:
        head_dims, seqs, tokens, hidden = [64], [128, 256], 512, 128
        repeats, chain_flops = 2, 1.0
    else:
        head_dims, seqs, tokens, hidden = (
            [64, 128, 256],
            [512, 1024, 2048, 4096, 8192, 16384],
            16384,
            2048,
        )
        repeats, chain_flops = 5, 2e12
    if args.head_dims:
        head_dims = _int_list(args.head_dims)
    if args.seqs:
        seqs = _int_list(args.seqs)
    tokens = args.tokens or tokens
    hidden = args.hidden or hidden
    repeats = args.repeats or repeats
    chain_flops = args.chain_flops or chain_flops
    causals = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]

    st = Settings(
        dtype=jnp.dtype(args.dtype),
        repeats=repeats,
        warmup_seconds=0.0 if args.smoke else args.warmup_seconds,
        chain_flops=chain_flops,
        do_bwd=not args.no_bwd,
        deadline=t_start + args.max_seconds if args.max_seconds > 0 else math.inf,
        verbose=args.verbose,
    )
    env = environment()
    print(f"# {json.dumps(env)}", flush=True)
    print(f"# devices: {jax.devices()}", flush=True)
    print(
        f"# impls {impls}; head dims {head_dims}; seqs {seqs}; causal {causals}; "
        f"tokens {tokens}; hidden {hidden}; dtype {args.dtype}; repeats {repeats}; "
        f"warm-up {st.warmup_seconds:g} s; rounds {args.rounds}; "
        f"chain {chain_flops:.3g} FLOPs; bwd {st.do_bwd}; max {args.max_seconds:.0f} s",
        flush=True,
    )

    if not args.smoke and not args.no_matmul and jax.devices()[0].platform == "gpu":
        try:
            print(f"# matmul bf16 8192^3 chain: {matmul_tflops():.0f} TFLOP/s", flush=True)
        except Exception as e:
            print(f"# matmul failed: {short_reason(e)}", flush=True)

    try:
        extra = [parse_cell(t) for t in (*(BEYOND_GRID if args.beyond_grid else ()), *args.cell)]
    except ValueError as e:
        print(f"bad cell: {e}", file=sys.stderr)
        return 2
    cells = ([] if args.no_grid else grid(head_dims, seqs, causals, tokens, hidden)) + extra
    fast = [i for i in impls if i not in SLOW_IMPLS]
    slow = [i for i in impls if i in SLOW_IMPLS]
    # Pass 1: every cell with the fast implementations side by side, --rounds times in a row with
    # the order reversed every other round (A B C, C B A, ...), so that a drift of the GPU's clocks
    # over a cell favours no implementation; pass 2: the slow reference, once.
    order = [
        (c, i, r)
        for c in cells
        for r in range(args.rounds)
        for i in (fast if r % 2 == 0 else fast[::-1])
    ] + [(c, i, 0) for c in cells for i in slow]
    results: dict[tuple[Cell, str], dict[str, Any]] = {}
    rounds: dict[tuple[Cell, str], list[tuple[float | None, float | None]]] = {}

    def records() -> list[dict[str, Any]]:
        """Records in grid order (cell, then impl in canonical order)."""
        return [results[(c, i)] for c in cells for i in impls if (c, i) in results]

    def report() -> None:
        recs = records()
        write_json(args.out, env, recs)
        print()
        print(f"## Forward TFLOP/s ({env['gpu']}, jax {env['jax']}, cuDNN {env['cudnn']})")
        print()
        print(table(recs, impls, "fwd_tflops"))
        if st.do_bwd:
            print()
            print("## Backward TFLOP/s (2.5x forward FLOPs / (fwd+bwd time - fwd time))")
            print()
            print(table(recs, impls, "bwd_tflops"))
        print()
        print(
            f"# total {time.perf_counter() - t_start:.1f} s"
            + (f"; wrote {args.out}" if args.out else ""),
            flush=True,
        )

    def hung(what: str) -> None:
        print(
            f"!! {what} ran past --cell-timeout {args.cell_timeout:g} s: taken for a hang; "
            "reporting what was measured and exiting with status 3",
            flush=True,
        )
        report()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(3)

    for cell, impl, rnd in order:
        what = f"{impl} d={cell.head_dim} s={cell.seq} causal={cell.causal}"
        watchdog = None
        if args.cell_timeout > 0:
            watchdog = threading.Timer(args.cell_timeout, hung, (what,))
            watchdog.daemon = True
            watchdog.start()
        fwd_tf, bwd_tf, note = measure(impl, cell, st)
        if watchdog is not None:
            watchdog.cancel()
        got = rounds.setdefault((cell, impl), [])
        got.append((fwd_tf, bwd_tf))
        results[(cell, impl)] = {
            "impl": impl,
            "head_dim": cell.head_dim,
            "seq": cell.seq,
            "batch": cell.batch,
            "heads": cell.heads,
            "causal": cell.causal,
            "fwd_tflops": _round(_median([f for f, _ in got])),
            "bwd_tflops": _round(_median([b for _, b in got])),
        }
        if cell.heads_kv:
            results[(cell, impl)]["heads_kv"] = cell.heads_kv
        if cell.beyond:
            results[(cell, impl)]["beyond"] = True
        if args.rounds > 1:
            results[(cell, impl)]["fwd_tflops_rounds"] = [_round(f) for f, _ in got]
            results[(cell, impl)]["bwd_tflops_rounds"] = [_round(b) for _, b in got]
        elapsed = time.perf_counter() - t_start
        print(
            f"[{elapsed:6.1f} s] {impl:8s} r{rnd} d={cell.head_dim:<3d} s={cell.seq:<5d} "
            f"b={cell.batch:<3d} h={cell.heads}/{cell.kv_heads:<3d} "
            f"causal={'yes' if cell.causal else 'no ':3s} "
            f"fwd {_fmt_tf(fwd_tf):>6s} bwd {_fmt_tf(bwd_tf):>6s} TFLOP/s | {note}",
            flush=True,
        )
        write_json(args.out, env, records())  # after every cell: a killed run keeps its data
        jax.clear_caches()

    report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
