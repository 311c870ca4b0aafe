"""Random-interleaving model of the forward kernels' synchronisation (no GPU needed).

simulate models one CTA of fwd_kernel (cuda/hopper/fwd/kernel.cuh, the one-tile kernel): the
producer thread's K/V TMA ring (kv_stages stages, full barriers completed by the TMA some time
after issue, empty barriers counting one arrival per consumer warpgroup, parity waits), and W
consumer warpgroups passing the issue token around named barriers of 2 warpgroups each
(consume_tile, cuda/hopper/fwd/mainloop.cuh). Warpgroup c computes key blocks [0, n_mine) and,
in the WgSkip configurations, passes [n_mine, n_blocks) on with only the token hand-over and the
stage releases (pass_skipped_blocks); without WgSkip every warpgroup has n_mine = n_blocks.
simulate_persistent models fwd_kernel_persistent: several tiles per CTA, one Q buffer with the
q_full / q_empty barriers, O staged in its own buffer, per-tile key counts under the causal mask,
WgSkip optionally. Checks, over many random schedules: no deadlock, no named barrier over-arrived
or left half-arrived, every computed block reads the K/V tile (and Q) of its own block and tile,
the producer never refills a stage or the Q buffer while a consumer still reads it, and no
warpgroup rewrites its O rows before the previous store has read them.

The variant paths (simulate_persistent_tiles, main_variants): tiles visit key blocks
[begin, end), each warpgroup a sub-range [mine_begin, mine_end) of it with the blocks above passed
first and those below passed last (pass_trailing_blocks), and tiles that see nothing skip the Q
barriers and the rings; the plans come from random ranges, from random variant problems (a port of
common/mask.cuh's TileMask and fwd/mainloop.cuh's range functions, checked against the visibility
rule of common/problem.h) and from the benchmark shapes. host_mask_check compiles mask.cuh for the
host and compares its answers with the port. The one-tile kernel's variant CTAs run as one-tile
plans of the persistent model (the same rings and token ring; its Q wait is the first q_full
phase).

Run: python3 tests/gpu/cuda/fwd_protocol_model.py
"""

import itertools
import random


class MBar:
    def __init__(self, count):
        self.count, self.pending, self.phase = count, count, 0  # phase = completed phases

    def arrive(self):
        self.pending -= 1
        assert self.pending >= 0
        if self.pending == 0:
            self.phase += 1
            self.pending = self.count

    def done(self, parity):  # try_wait.parity: the phase with this parity has completed
        return self.phase % 2 != parity


class NamedBar:
    def __init__(self, count):
        self.count, self.arrived, self.gen = count, 0, 0

    def arrive(self):
        self.arrived += 1
        assert self.arrived <= self.count, "named barrier over-arrived"
        if self.arrived == self.count:
            self.arrived = 0
            self.gen += 1


def simulate(W, n_blocks, n_mine, stages, rng):
    full = {r: [MBar(1) for _ in range(stages)] for r in "KV"}
    empty = {r: [MBar(W) for _ in range(stages)] for r in "KV"}
    content = {r: [None] * stages for r in "KV"}
    readers = {r: [set() for _ in range(stages)] for r in "KV"}
    inflight = []  # (ring, stage, block): TMA issued, not landed
    sched = [NamedBar(2) for _ in range(W)]

    def producer():
        ph = {"K": 0, "V": 0}
        st = {"K": 0, "V": 0}

        def load(r, blk):
            s = st[r]
            while not empty[r][s].done(ph[r] ^ 1):
                yield
            assert not readers[r][s], (
                f"producer refills {r} stage {s} while read by {readers[r][s]}"
            )
            content[r][s] = ("pending", blk)
            inflight.append((r, s, blk))
            st[r] += 1
            if st[r] == stages:
                st[r] = 0
                ph[r] ^= 1
            yield

        if n_blocks == 0:
            return
        n = n_blocks - 1
        yield from load("K", n)
        while n > 0:
            yield from load("K", n - 1)
            yield from load("V", n)
            n -= 1
        yield from load("V", 0)

    def consumer(c):
        st = {"K": 0, "V": 0}
        ph = {"K": 0, "V": 0}

        def adv(r):
            st[r] += 1
            if st[r] == stages:
                st[r] = 0
                ph[r] ^= 1

        def sync(b):
            bar = sched[b]
            g = bar.gen
            bar.arrive()
            while bar.gen == g:
                yield

        def wait_full(r, blk):
            s = st[r]
            while not full[r][s].done(ph[r]):
                yield
            assert content[r][s] == blk, (
                f"WG{c} expected {r}({blk}) in stage {s}, found {content[r][s]}"
            )
            readers[r][s].add(c)

        def release(r, reading):
            s = st[r]
            if reading:
                readers[r][s].discard(c)
            empty[r][s].arrive()
            adv(r)

        mine, nxt = c, (c + 1) % W
        if c == W - 1:
            sched[0].arrive()
            yield
        nm = n_mine[c]
        # Skipped blocks (pass_skipped_blocks): token hand-over, and each stage waited on (full)
        # before it is released, like a consumer that reads nothing. Without the wait a skipping
        # warpgroup can arrive for a stage's next lap before a slower warpgroup's arrival for this
        # lap (V(0) and V(2) are released only one token step apart);
        # tests/test_kernel_protocol_models.py checks that the model sees that bug.
        for n in range(n_blocks - 1, nm - 1, -1):
            yield from sync(mine)
            sched[nxt].arrive()
            yield
            yield from wait_full("K", n)
            release("K", True)
            if n + 1 < n_blocks:
                yield from wait_full("V", n + 1)
                release("V", True)
            yield
        if nm < n_blocks:  # V(n_mine), whose PV the first computed block would have issued
            yield from wait_full("V", nm)
            release("V", True)
        if nm > 0:
            n = nm - 1
            yield from sync(mine)
            yield from wait_full("K", n)
            sched[nxt].arrive()
            yield
            release("K", True)
            yield
            for n in range(nm - 2, -1, -1):
                yield from sync(mine)
                yield from wait_full("K", n)
                yield from wait_full("V", n + 1)
                sched[nxt].arrive()
                yield
                release("K", True)
                yield
                release("V", True)
                yield
            yield from wait_full("V", 0)
            yield
            release("V", True)
        if c == 0:
            yield from sync(0)  # balances the first token

    threads = {"P": producer()}
    for c in range(W):
        threads[c] = consumer(c)
    alive = dict(threads)
    steps = 0
    while alive or inflight:
        steps += 1
        assert steps < 100000
        # A TMA may land at any time.
        if inflight and rng.random() < 0.3:
            r, s, blk = inflight.pop(rng.randrange(len(inflight)))
            content[r][s] = blk
            full[r][s].arrive()
            continue
        if not alive:
            continue
        # Try threads in random order until one makes progress (a generator step always "progresses";
        # deadlock shows as every thread spinning: detect by a step budget of spins with no state change).
        name = rng.choice(list(alive))
        try:
            next(alive[name])
        except StopIteration:
            del alive[name]
        if steps > 50000:
            raise AssertionError(f"deadlock? alive {list(alive)}")
    for b in sched:
        assert b.arrived == 0, "named barrier left half-arrived"


def main():
    rng = random.Random(1)
    runs = 0
    for W in (2, 3):
        for n_blocks in range(0, 7):
            choices = range(0, n_blocks + 1)
            for n_mine in itertools.product(choices, repeat=W):
                # The warpgroup with the tile's last valid row needs every block; n_mine is
                # non-decreasing in c except for warpgroups wholly past seq_q (they get n_blocks).
                if n_blocks and max(n_mine) != n_blocks:
                    continue
                if n_blocks == 0 and any(n_mine):
                    continue
                for stages in (2, 3):
                    for _ in range(20):
                        simulate(W, n_blocks, list(n_mine), stages, rng)
                        runs += 1
    print(
        f"protocol model: {runs} random schedules, no deadlock, no race, every block read its own tile"
    )
    # The ranges of the model's port against common/mask.cuh itself (when a C++ compiler is found).
    host_mask_check(problems=40)


def simulate_persistent(W, n_blocks, tiles, stages, rng, skip=False, causal=False):
    """Random tiles for simulate_persistent_tiles: every tile has n_blocks key blocks [0, n_blocks),
    or (causal) a random count in [0, n_blocks]. skip (WgSkip, warpgroup_blocks /
    pass_skipped_blocks): warpgroup c computes only blocks [0, n_mine) and passes the others on; one
    random warpgroup (the one holding the tile's last valid row) computes all, the others any count
    from 0 up (the kernel's counts -- none past seq_q, the causal count of its own rows -- are
    special cases)."""
    nb = [rng.randint(0, n_blocks) if causal else n_blocks for _ in range(tiles)]
    plan = []
    for t in range(tiles):
        full_wg = rng.randrange(W)
        mine = [(0, nb[t] if (not skip or c == full_wg) else rng.randint(0, nb[t])) for c in range(W)]
        plan.append((0, nb[t], mine))
    simulate_persistent_tiles(W, plan, stages, rng)


def random_range_plan(W, max_blocks, tiles, rng, skip):
    """Random variant tiles: key blocks [begin, end) anywhere in [0, max_blocks) (empty tiles
    included: padding tiles, tiles whose rows see no key), and with skip per warpgroup any
    sub-range [mine_begin, mine_end) (an empty one is (begin, begin), as warpgroup_blocks gives),
    so blocks are passed above (pass_skipped_blocks) and below (pass_trailing_blocks) it."""
    plan = []
    for _ in range(tiles):
        if rng.random() < 0.2:
            b = e = rng.randint(0, max_blocks)
        else:
            b = rng.randint(0, max_blocks - 1)
            e = rng.randint(b + 1, max_blocks)
        mine = []
        for _c in range(W):
            if not skip:
                mine.append((b, e))
            elif rng.random() < 0.25 or e == b:
                mine.append((b, b))
            else:
                mb = rng.randint(b, e - 1)
                mine.append((mb, rng.randint(mb + 1, e)))
        plan.append((b, e, mine))
    return plan


def simulate_persistent_tiles(W, plan, stages, rng, max_steps=None):
    """fwd_kernel_persistent: the tiles of plan, [(begin, end, [(mine_begin, mine_end) per
    warpgroup])], through one CTA. The K/V rings and the issue-token ring run on across tiles; one
    Q buffer, which the producer refills for the next tile (after that tile's first K) once every
    warpgroup arrived on q_empty (after its last S = Q K^T of the tile, the S of mine_begin, or
    right after its q_full wait when it computes no block); O through its own buffer per
    warpgroup, each store's read awaited before the warpgroup rewrites its rows. A tile with
    end <= begin (its rows see no key) is skipped by producer and consumers alike (no Q barrier,
    no stage), but its epilogue still stores O. Warpgroup c computes blocks [mine_begin,
    mine_end); blocks [mine_end, end) are passed first (pass_skipped_blocks), blocks [begin,
    mine_begin) last (pass_trailing_blocks), with the token hand-over and every stage waited for
    and released."""
    tiles = len(plan)
    for b, e, mine in plan:
        assert len(mine) == W
        for mb, me in mine:
            assert e <= b or b <= mb <= me <= e, (b, e, mine)
    full = {r: [MBar(1) for _ in range(stages)] for r in "KV"}
    empty = {r: [MBar(W) for _ in range(stages)] for r in "KV"}
    content = {r: [None] * stages for r in "KV"}
    readers = {r: [set() for _ in range(stages)] for r in "KV"}
    q_full, q_empty = MBar(1), MBar(W)
    q = {"content": None, "readers": set()}
    o_buf = [{"store_reading": False} for _ in range(W)]
    inflight = []  # ("K"/"V", stage, (tile, blk)) or ("Q", 0, tile) or ("O", c, tile)
    sched = [NamedBar(2) for _ in range(W)]

    def producer():
        ph = {"K": 0, "V": 0}
        st = {"K": 0, "V": 0}

        def load(r, tag):
            s = st[r]
            while not empty[r][s].done(ph[r] ^ 1):
                yield
            assert not readers[r][s], (
                f"producer refills {r} stage {s} while read by {readers[r][s]}"
            )
            content[r][s] = ("pending", tag)
            inflight.append((r, s, tag))
            st[r] += 1
            if st[r] == stages:
                st[r] = 0
                ph[r] ^= 1
            yield

        q_phase = 0  # q_empty phases waited for so far, mod 2
        for t in range(tiles):
            begin, end, _ = plan[t]
            if end <= begin:
                continue  # the consumers skip its Q barriers too
            n = end - 1
            yield from load("K", (t, n))
            # Q once every warpgroup's last S of the previous tile retired (a fresh barrier passes
            # parity 1 at once).
            while not q_empty.done(q_phase ^ 1):
                yield
            q_phase ^= 1
            assert not q["readers"], f"Q of tile {t} loaded while read by {q['readers']}"
            q["content"] = ("pending", t)
            inflight.append(("Q", 0, t))
            yield
            while n > begin:
                yield from load("K", (t, n - 1))
                yield from load("V", (t, n))
                n -= 1
            yield from load("V", (t, begin))

    def consumer(c):
        st = {"K": 0, "V": 0}
        ph = {"K": 0, "V": 0}

        def adv(r):
            st[r] += 1
            if st[r] == stages:
                st[r] = 0
                ph[r] ^= 1

        def sync(b):
            bar = sched[b]
            g = bar.gen
            bar.arrive()
            while bar.gen == g:
                yield

        def wait_full(r, tag, reads_q=True):
            s = st[r]
            while not full[r][s].done(ph[r]):
                yield
            assert content[r][s] == tag, (
                f"WG{c} expected {r}{tag} in stage {s}, found {content[r][s]}"
            )
            readers[r][s].add(c)
            if r == "K" and reads_q:  # S = Q K^T of this block reads Q too
                assert q["content"] == tag[0], f"WG{c} S of tile {tag[0]} found Q {q['content']}"

        def release(r):
            s = st[r]
            readers[r][s].discard(c)
            empty[r][s].arrive()
            adv(r)

        def release_q():  # after the tile's last S (block mine_begin) retired
            q["readers"].discard(c)
            q_empty.arrive()

        mine, nxt = c, (c + 1) % W
        q_phase = 0  # the parity of q_full's next phase
        if c == W - 1:
            sched[0].arrive()
            yield
        for t in range(tiles):
            begin, n_blocks, ranges = plan[t]  # n_blocks: the tile's end
            mb, nm = ranges[c]  # this warpgroup's [mine_begin, mine_end)
            if n_blocks <= begin:
                mb = nm = n_blocks = begin
            if n_blocks > begin:
                while not q_full.done(q_phase):
                    yield
                q_phase ^= 1
                if nm > mb:
                    assert q["content"] == t, f"WG{c} tile {t} found Q {q['content']}"
                    q["readers"].add(c)
                else:
                    q_empty.arrive()  # WgSkip: this warpgroup reads no Q in this tile
            # pass_skipped_blocks: blocks [nm, n_blocks), each stage waited on before its release.
            for n in range(n_blocks - 1, nm - 1, -1):
                yield from sync(mine)
                sched[nxt].arrive()
                yield
                yield from wait_full("K", (t, n), reads_q=False)
                release("K")
                if n + 1 < n_blocks:
                    yield from wait_full("V", (t, n + 1))
                    release("V")
                yield
            if nm < n_blocks:
                yield from wait_full("V", (t, nm))
                release("V")
            # consume_tile: blocks nm - 1 down to mb; K(n) and V(n + 1) per step, V(mb) at the end.
            if nm > mb:
                n = nm - 1
                yield from sync(mine)
                yield from wait_full("K", (t, n))
                sched[nxt].arrive()
                yield
                release("K")
                if n == mb:
                    release_q()
                yield
                for n in range(nm - 2, mb - 1, -1):
                    yield from sync(mine)
                    yield from wait_full("K", (t, n))
                    yield from wait_full("V", (t, n + 1))
                    sched[nxt].arrive()
                    yield
                    release("K")
                    if n == mb:
                        release_q()
                    yield
                    release("V")
                    yield
                yield from wait_full("V", (t, mb))
                yield
                release("V")
            # pass_trailing_blocks: blocks [begin, mb), K(n) then V(n), each waited on.
            for n in range(mb - 1, begin - 1, -1):
                yield from sync(mine)
                sched[nxt].arrive()
                yield
                yield from wait_full("K", (t, n), reads_q=False)
                release("K")
                yield from wait_full("V", (t, n))
                release("V")
                yield
            # Epilogue: wait for the previous store's read of this warpgroup's O rows, rewrite, store.
            while o_buf[c]["store_reading"]:
                yield
            yield
            assert not o_buf[c]["store_reading"], (
                f"WG{c} rewrites its O rows while the last store reads them"
            )
            o_buf[c]["store_reading"] = True
            inflight.append(("O", c, t))
            yield
        while o_buf[c]["store_reading"]:
            yield
        if c == 0:
            yield from sync(0)

    alive = {"P": producer()}
    for c in range(W):
        alive[c] = consumer(c)
    work = sum(max(0, e - b) for b, e, _ in plan) + tiles
    limit = max_steps or max(200000, 4000 * W * work)
    steps = 0
    while alive or inflight:
        steps += 1
        if inflight and rng.random() < 0.3:
            r, s, tag = inflight.pop(rng.randrange(len(inflight)))
            if r == "Q":
                q["content"] = tag
                q_full.arrive()
            elif r == "O":
                o_buf[s]["store_reading"] = False
            else:
                content[r][s] = tag
                full[r][s].arrive()
            continue
        if not alive:
            continue
        name = rng.choice(list(alive))
        try:
            next(alive[name])
        except StopIteration:
            del alive[name]
        if steps > limit:
            raise AssertionError(f"deadlock? alive {list(alive)}")
    for b in sched:
        assert b.arrived == 0, "named barrier left half-arrived"
    assert q_full.pending == 1 and q_empty.pending == W, "a Q barrier left half-arrived"
    for r in "KV":
        for s in range(stages):
            assert not readers[r][s], f"{r} stage {s} still read by {readers[r][s]}"
            assert empty[r][s].pending == W, f"{r} stage {s}'s empty barrier left half-arrived"


# (WgSkip, causal) of the persistent configurations: "hd128 persistent" without WgSkip under both
# masks, "hd64 persistent" with WgSkip under the causal mask only.
PERSISTENT_CASES = ((False, False), (False, True), (True, True))


def main_persistent():
    rng = random.Random(2)
    runs = 0
    for W in (2, 3):
        for n_blocks in range(0, 5):
            for tiles in (1, 2, 3, 5):
                for stages in (2, 3):
                    for skip, causal in PERSISTENT_CASES:
                        for _ in range(60):
                            simulate_persistent(W, n_blocks, tiles, stages, rng, skip, causal)
                            runs += 1
    print(
        f"persistent protocol model: {runs} random schedules, no deadlock, no race, every tile read its own Q/K/V"
    )
    # The variant paths: key ranges [begin, end), WgSkip's trailing pass, empty tiles, random
    # variant problems and the benchmark shapes.
    main_variants(verbose=False)


# ---------------------------------------------------------------------------------------------
# The variant paths: the key ranges of common/mask.cuh (TileMask) and fwd/mainloop.cuh
# (tile_key_blocks, warpgroup_blocks) and fwd/score.cuh's partial-tile test, ported; checked
# against the visibility rule of common/problem.h (numpy), against mask.cuh itself compiled for the
# host (host_mask_check: g++, the warp-collective narrowing run by 32 threads that emulate the
# shuffles), and turned into tile plans of real problems for simulate_persistent_tiles.
# ---------------------------------------------------------------------------------------------

UNB = 1 << 30  # kWindowUnbounded
CHUNK = 64  # kSegmentChunk


def _cdiv(a, b):
    return -(-a // b)


def _clamp(x, lo, hi):
    return min(max(x, lo), hi)


def _at(arr, i):
    """arr[i], asserting the index the kernel would use lies inside the array."""
    assert 0 <= i < len(arr), f"index {i} outside [0, {len(arr)})"
    return arr[i]


def segment_ranges(ids):
    """The (min, max) id of every 64-row chunk (the last one over the valid positions only)."""
    return [(min(ids[c:c + CHUNK]), max(ids[c:c + CHUNK])) for c in range(0, len(ids), CHUNK)]


class Problem:
    """One batch entry of a forward problem: the band (causal folded in as make_mask_args does),
    lengths (None: absent; clamped), segment ids (lists or None)."""

    def __init__(self, seq_q, seq_k, causal=False, left=UNB, right=UNB, q_len=None, kv_len=None,
                 q_ids=None, kv_ids=None, softcap=0.0, sinks=False):
        self.seq_q, self.seq_k, self.causal = seq_q, seq_k, causal
        self.left, self.right = left, right
        self.q_len_arg, self.kv_len_arg = q_len, kv_len
        self.q_ids, self.kv_ids = q_ids, kv_ids
        self.softcap, self.sinks = softcap, sinks

    def kind(self):
        """fwd_kernel_kind: the mask's kind, except that a soft cap takes the variant kernel; sinks
        keep the mask's kernel."""
        if (self.left < UNB or self.right < UNB or self.q_len_arg is not None
                or self.kv_len_arg is not None or self.q_ids is not None or self.softcap > 0):
            return "variant"
        return "causal" if self.causal else "dense"

    def visible(self):
        """numpy bool [seq_q, seq_k]: common/problem.h's rule, written independently of TileMask."""
        import numpy as np

        q_len = self.seq_q if self.q_len_arg is None else _clamp(self.q_len_arg, 0, self.seq_q)
        kv_len = self.seq_k if self.kv_len_arg is None else _clamp(self.kv_len_arg, 0, self.seq_k)
        off = kv_len - q_len
        i = np.arange(self.seq_q, dtype=np.int64)[:, None]
        j = np.arange(self.seq_k, dtype=np.int64)[None, :]
        v = (i < q_len) & (j < kv_len)
        right = min(self.right, 0) if self.causal else self.right
        if self.left < UNB:
            v &= j >= i + off - self.left
        if right < UNB:
            v &= j <= i + off + right
        if self.q_ids is not None:
            v &= np.asarray(self.q_ids)[:, None] == np.asarray(self.kv_ids)[None, :]
        return v


class TileMask:
    """common/mask.cuh's TileMask<K> as the forward kernels build it (fwd_tile_mask): kVariant from
    the problem's MaskArgs, kDense / kCausal from the shape alone."""

    def __init__(self, kind, p):
        self.kind = kind
        self.q_len, self.kv_len = p.seq_q, p.seq_k
        self.q_ids = self.kv_ids = self.q_ranges = self.kv_ranges = None
        if kind == "variant":
            self.left = p.left
            self.right = 0 if (p.causal and p.right > 0) else p.right
            if p.q_len_arg is not None:
                self.q_len = _clamp(p.q_len_arg, 0, p.seq_q)
            if p.kv_len_arg is not None:
                self.kv_len = _clamp(p.kv_len_arg, 0, p.seq_k)
            if p.q_ids is not None:
                self.q_ids, self.kv_ids = p.q_ids, p.kv_ids
                self.q_ranges, self.kv_ranges = segment_ranges(p.q_ids), segment_ranges(p.kv_ids)
        else:
            self.left, self.right = UNB, (0 if kind == "causal" else UNB)
        self.off = self.kv_len - self.q_len

    def bounded_left(self):
        return self.kind == "variant" and self.left < UNB

    def bounded_right(self):
        return self.kind == "causal" or (self.kind == "variant" and self.right < UNB)

    def key_lo(self, i):
        return _clamp(i + self.off - self.left, 0, self.kv_len) if self.bounded_left() else 0

    def key_hi(self, i):
        if not self.bounded_right():
            return self.kv_len
        return _clamp(i + self.off + (0 if self.kind == "causal" else self.right) + 1, 0, self.kv_len)

    def key_span(self, r0, r1):
        r1 = min(r1, self.q_len)
        if r0 >= r1:
            return 0, 0
        return self.key_lo(r0), self.key_hi(r1 - 1)

    @staticmethod
    def blocks_of(lo, hi, b):
        return (0, 0) if lo >= hi else (lo // b, _cdiv(hi, b))

    @staticmethod
    def id_hull(ranges, p0, p1):
        assert 0 <= p0 < p1
        chunks = [_at(ranges, c) for c in range(p0 // CHUNK, (p1 - 1) // CHUNK + 1)]
        return min(r[0] for r in chunks), max(r[1] for r in chunks)

    @staticmethod
    def narrow_by_hull(ranges, mn, mx, lo, hi):
        assert 0 <= lo < hi
        hit = [c for c in range(lo // CHUNK, (hi - 1) // CHUNK + 1)
               if _at(ranges, c)[0] <= mx and _at(ranges, c)[1] >= mn]
        if not hit:
            return 0, 0
        return max(lo, hit[0] * CHUNK), min(hi, (hit[-1] + 1) * CHUNK)

    def narrow_keys_by_segment(self, r0, r1, lo, hi):
        if self.kind != "variant" or self.q_ids is None or lo >= hi:
            return lo, hi
        mn, mx = self.id_hull(self.q_ranges, r0, min(r1, self.q_len))
        return self.narrow_by_hull(self.kv_ranges, mn, mx, lo, hi)

    def needs_mask(self, r0, r1, c0, c1):
        """TileMask::needs_mask (host version, for the comparison with the compiled header)."""
        if r1 > self.q_len or c1 > self.kv_len:
            return True
        if self.kind == "dense":
            return False
        if c0 < self.key_lo(r1 - 1) or c1 > self.key_hi(r0):
            return True
        if self.kind == "variant" and self.q_ids is not None:
            v = _at(self.q_ranges, r0 // CHUNK)[0]
            for c in range(r0 // CHUNK, (r1 - 1) // CHUNK + 1):
                if _at(self.q_ranges, c) != (v, v):
                    return True
            for c in range(c0 // CHUNK, (c1 - 1) // CHUNK + 1):
                if _at(self.kv_ranges, c) != (v, v):
                    return True
        return False


def tile_key_blocks(mask, r0, rows, n):
    """fwd/mainloop.cuh tile_key_blocks: the producer warp and every consumer warp compute it."""
    if mask.kind != "variant":
        total = _cdiv(mask.kv_len, n)
        end = total
        if mask.kind == "causal":
            last_row = min(r0 + rows, mask.q_len) - 1
            max_col = last_row + mask.kv_len - mask.q_len
            end = 0 if max_col < 0 else min(total, max_col // n + 1)
        return 0, end
    lo, hi = mask.key_span(r0, r0 + rows)
    lo, hi = mask.narrow_keys_by_segment(r0, r0 + rows, lo, hi)
    return TileMask.blocks_of(lo, hi, n)


def warpgroup_blocks(cfg, mask, m0, c, seq_q, begin, end):
    """fwd/mainloop.cuh warpgroup_blocks."""
    if not cfg["wg_skip"]:
        return begin, end
    b, e = begin, end
    if m0 + c * 64 >= seq_q:
        b = e = begin
    elif mask.kind != "dense":
        b, e = tile_key_blocks(mask, m0 + c * 64, 64, cfg["n"])
        if mask.kind == "variant":
            b, e = max(b, begin), min(e, end)
            if e <= b:
                b = e = begin
    return (b if mask.kind == "variant" else begin), e


def uniform_key_run(mask, c0, c1, v):
    """common/mask.cuh TileMask::uniform_key_run: the whole chunks meeting [c0, c1) of range (v, v),
    as one run when they are contiguous, else (0, 0)."""
    if c0 >= c1:
        return 0, 0
    one = [c for c in range(c0 // CHUNK, (c1 - 1) // CHUNK + 1) if _at(mask.kv_ranges, c) == (v, v)]
    if not one or len(one) != one[-1] - one[0] + 1:
        return 0, 0
    return one[0] * CHUNK, (one[-1] + 1) * CHUNK


def scores_needs_mask(mask, mask_r0, mask_r1, kb, n, key_lo, key_hi):
    """fwd/score.cuh FwdScores::needs_mask<N>(kb) (its per-tile values computed as there; the
    uniform run over the keys [key_lo, key_hi) the warpgroup visits)."""
    c0, col_end = kb * n, (kb + 1) * n
    if mask.kind != "variant":
        if col_end > mask.kv_len:
            return True
        return mask.kind == "causal" and col_end - 1 > mask_r0 + mask.kv_len - mask.q_len
    r1 = min(mask_r1, mask.q_len)
    rows_real = mask_r0 < r1 and mask_r1 <= mask.q_len
    if not rows_real:
        return True
    full_lo, full_hi = mask.key_lo(r1 - 1), mask.key_hi(mask_r0)
    if c0 < full_lo or col_end > full_hi or col_end > mask.kv_len:
        return True
    if mask.kv_ids is None:
        return False
    v = _at(mask.q_ranges, mask_r0 // CHUNK)[0]
    if any(_at(mask.q_ranges, c) != (v, v) for c in range(mask_r0 // CHUNK, (r1 - 1) // CHUNK + 1)):
        return True
    uni_lo, uni_hi = uniform_key_run(mask, key_lo, min(key_hi, mask.kv_len), v)
    return c0 < uni_lo or col_end > uni_hi


# The forward configurations (fwd/config.cuh) per head dim and kind: consumer warpgroups W, key
# block n, WgSkip, persistent; fwd_config picks the one the library's heuristic runs
# (fwd/heuristics.h: the keys a 128-row tile can visit against the causal threshold).
def fwd_config(d, kind, persistent):
    if d == 64:
        w = 2 if kind == "variant" else 3
        return {"name": "hd64" + (" persistent" if persistent else ""), "W": w, "m": 64 * w, "n": 128,
                "wg_skip": persistent and kind != "dense", "persistent": persistent, "stages": 2}
    if d == 128:
        return {"name": "hd128" + (" persistent" if persistent else ""), "W": 2, "m": 128,
                "n": 176 if (kind == "dense" and not persistent) else 128, "wg_skip": False,
                "persistent": persistent, "stages": 2}
    assert not persistent
    return {"name": "hd256", "W": 2, "m": 128, "n": 80, "wg_skip": False, "persistent": False, "stages": 2}


def library_persistent(p, d):
    """fwd/heuristics.h fwd_use_persistent with fwd_band_keys."""
    kind = p.kind()
    right = 0 if (p.causal and p.right > 0) else p.right
    if p.left >= UNB or right >= UNB:
        keys = p.seq_k
    else:
        span = p.left + right + 128
        keys = (span if span > 0 else 0) if span < p.seq_k else p.seq_k
    dense = not p.causal and kind != "variant"
    limit = {64: 4096, 128: 2048 if dense else 4096}.get(d, 0)
    return keys <= limit


def lpt_tile_coord(t, m_blocks, heads, batch, section):
    pairs = heads * batch
    per_section = section * m_blocks
    assert per_section > 0, "division by zero in lpt_tile_coord"
    sec = t // per_section
    within = t - sec * per_section
    in_section = min(pairs - sec * section, section)
    pair = sec * section + within % in_section
    return m_blocks - 1 - within // in_section, pair % heads, pair // heads


def band_ascending(p, block_m, block_n):
    """fwd/launch.cuh fwd_band_ascending (the band only)."""
    band = Problem(p.seq_q, p.seq_k, p.causal, p.left, p.right)
    mask = TileMask("variant", band)
    m_blocks = _cdiv(p.seq_q, block_m)

    def blocks(m):
        b, e = TileMask.blocks_of(*mask.key_span(m * block_m, m * block_m + block_m), block_n)
        return e - b

    return m_blocks > 1 and blocks(0) > blocks(m_blocks - 1)


def cta_tiles(cfg, kind, m_blocks, heads, batch, ctas, section, m_ascending):
    """FwdScheduler<Cfg, M>::tile for the persistent kernel: each CTA's (m block, head, batch) in
    round order; checks the deal covers every tile once and a CTA's tile index only grows."""
    ordered = kind != "dense"
    num = m_blocks * heads * batch
    out, seen = [], set()
    for b in range(ctas):
        mine, r, last = [], 0, -1
        while True:
            t = r * ctas + ((ctas - 1 - b) if (ordered and r & 1) else b)
            if t >= num:
                break
            assert t > last
            last = t
            if ordered:
                m, h, bb = lpt_tile_coord(t, m_blocks, heads, batch, section)
                if kind == "variant" and m_ascending:
                    m = m_blocks - 1 - m
            else:
                m, h, bb = t % m_blocks, (t // m_blocks) % heads, t // m_blocks // heads
            assert 0 <= m < m_blocks and 0 <= h < heads and 0 <= bb < batch
            assert (m, h, bb) not in seen, "a tile dealt twice"
            seen.add((m, h, bb))
            mine.append(m)
            r += 1
        out.append(mine)
    assert len(seen) == num, "a tile never dealt"
    return out


def tile_plan(cfg, p, m_blocks_list, vis=None, check=True):
    """The (begin, end, [(mine_begin, mine_end)]) of each listed m block of problem p under cfg,
    with the range invariants checked against the visibility rule: every visible key of the
    tile's (a warpgroup's) rows lies in its block range, the range lies inside the keys
    (0 <= begin <= end <= ceil(kv_len / n), so no TMA box starts at or past seq_k), a warpgroup's
    range lies in the tile's, and a block the partial-tile test passes as unmasked has every
    element of those rows visible."""
    import numpy as np

    kind = p.kind()
    mask = TileMask(kind, p)
    n, bm, w = cfg["n"], cfg["m"], cfg["W"]
    own_rows = cfg["wg_skip"] or kind == "variant"
    plan = []
    for m in m_blocks_list:
        m0 = m * bm
        begin, end = tile_key_blocks(mask, m0, bm, n)
        mine = [warpgroup_blocks(cfg, mask, m0, c, p.seq_q, begin, end) for c in range(w)]
        if check:
            if vis is None:
                rows = p.visible_rows(m0, m0 + bm)  # bench shapes: [rows, seq_k] slice
            else:
                rows = vis[m0:m0 + bm]
            assert 0 <= begin <= end <= _cdiv(mask.kv_len, n) or end <= begin, (m, begin, end)
            if end > begin:
                assert (end - 1) * n < p.seq_k

            def covers(r, lo_b, hi_b):
                cols = np.nonzero(r.any(axis=0))[0]
                if len(cols) == 0:
                    return True
                return lo_b * n <= cols[0] and cols[-1] < hi_b * n

            assert covers(rows, begin, end), f"m block {m}: a visible key outside [{begin}, {end})"
            for c, (mb, me) in enumerate(mine):
                wrows = rows[c * 64:(c + 1) * 64]
                if end > begin:
                    assert begin <= mb <= me <= end, (m, c, mb, me, begin, end)
                assert covers(wrows, mb, me) if me > mb else not wrows.any(), (
                    f"m block {m} warpgroup {c}: a visible key outside [{mb}, {me})"
                )
                mask_r0 = m0 + c * 64 if own_rows else m0
                mask_r1 = min(m0 + c * 64 + 64 if own_rows else m0 + bm, p.seq_q)
                sub = rows[mask_r0 - m0:mask_r1 - m0]
                for kb in range(mb, me):
                    if not scores_needs_mask(mask, mask_r0, mask_r1, kb, n, mb * n, me * n):
                        blk = sub[:, kb * n:(kb + 1) * n]
                        assert blk.shape[1] == n and blk.all(), (
                            f"m block {m} warpgroup {c}: block {kb} unmasked but not all visible"
                        )
        plan.append((begin, end, mine))
    return plan


def random_problem(rng, d):
    """A random variant problem (one batch entry) like the harness's cases, small."""
    sq = rng.choice([1, 17, 64, 127, 200, 300, 385, 500, 640])
    sk = rng.choice([0, 1, 64, 130, 300, 500, 700]) if rng.random() < 0.4 else sq
    causal = rng.random() < 0.5
    kw = {}
    f = rng.random()
    if f < 0.5:
        sides = [UNB, 0, 1, 40, 63, 64, 100, 200, -50, -130]
        kw["left"], kw["right"] = rng.choice(sides), rng.choice(sides)
    if rng.random() < 0.4:
        kw["q_len"] = rng.choice([-5, 0, 1, sq // 3 + 1, sq, sq + 7, rng.randint(0, sq)])
        kw["kv_len"] = rng.choice([-5, 0, 1, sk // 3 + 1, sk, sk + 7, rng.randint(0, max(sk, 0))])
    if rng.random() < 0.4 and sk > 0:
        def ids(seq):
            r = rng.random()
            if r < 0.5:  # sorted documents
                out, v = [], 0
                while len(out) < seq:
                    v += 1
                    out += [v] * rng.randint(1, max(1, seq // 3))
                return out[:seq]
            if r < 0.7:  # whole 64-position chunks of ids 1 and 2 in any order: a document's
                out = []  # uniform chunks that are not contiguous (no uniform run)
                while len(out) < seq:
                    out += [rng.randint(1, 2)] * CHUNK
                return out[:seq]
            return [rng.randrange(3) for _ in range(seq)]
        kw["q_ids"] = ids(sq)
        kw["kv_ids"] = kw["q_ids"] if sq == sk and rng.random() < 0.5 else ids(sk)
    if rng.random() < 0.2:
        kw["softcap"] = 30.0
    if rng.random() < 0.2:
        kw["sinks"] = True
    return Problem(sq, sk, causal, **kw)


# Two documents whose whole 64-position chunks interleave (1 1 2 1 2 2 1 2 ...): each chunk is
# uniform, but one document's chunks are not contiguous, so FwdScores finds no uniform run.
INTERLEAVED_IDS = [(1, 1, 2, 1, 2, 2, 1, 2)[(i // CHUNK) % 8] for i in range(1024)]


def check_random_variants(rng, problems=60, sims=True):
    """Random variant problems at every head dim and configuration: the range invariants of every
    tile, the persistent deal, and the protocol of each configuration's tile plans (the persistent
    kernel's CTAs with 1, 3 and 5 CTAs; the one-tile kernel's CTAs as one-tile plans). The first
    three are the interleaved documents, causal, at each head dim."""
    runs = 0
    for k in range(problems):
        d = (64, 128, 256)[k % 3]
        p = random_problem(rng, d)
        if k < 3:
            p = Problem(1024, 1024, True, q_ids=INTERLEAVED_IDS, kv_ids=INTERLEAVED_IDS)
        vis = p.visible()
        kind = p.kind()
        for persistent in ((False, True) if d != 256 else (False,)):
            cfg = fwd_config(d, kind, persistent)
            m_blocks = _cdiv(p.seq_q, cfg["m"])
            plan = tile_plan(cfg, p, range(m_blocks), vis)
            if not sims:
                continue
            if persistent:
                heads = 2
                for ctas in (1, 3, 5):
                    ascending = kind == "variant" and band_ascending(p, cfg["m"], cfg["n"])
                    section = rng.randint(1, heads)
                    per_cta = cta_tiles(cfg, kind, m_blocks, heads, 1, min(ctas, m_blocks * heads), section,
                                        ascending)
                    for ms in per_cta[:2]:
                        simulate_persistent_tiles(cfg["W"], [plan[m] for m in ms], cfg["stages"], rng)
                        runs += 1
            else:
                for m in rng.sample(range(m_blocks), min(3, m_blocks)):
                    simulate_persistent_tiles(cfg["W"], [plan[m]], cfg["stages"], rng)
                    runs += 1
    return runs


class BenchProblem(Problem):
    """A benchmark-shape problem whose visibility is built per tile (a [seq_q, seq_k] matrix at
    16k is 268 MB)."""

    def visible_rows(self, r0, r1):
        import numpy as np

        r1 = min(r1, self.seq_q)
        q_len = self.seq_q if self.q_len_arg is None else _clamp(self.q_len_arg, 0, self.seq_q)
        kv_len = self.seq_k if self.kv_len_arg is None else _clamp(self.kv_len_arg, 0, self.seq_k)
        off = kv_len - q_len
        i = np.arange(r0, r1, dtype=np.int64)[:, None]
        j = np.arange(self.seq_k, dtype=np.int64)[None, :]
        v = (i < q_len) & (j < kv_len)
        right = min(self.right, 0) if self.causal else self.right
        if self.left < UNB:
            v &= j >= i + off - self.left
        if right < UNB:
            v &= j <= i + off + right
        if self.q_ids is not None:
            v &= np.asarray(self.q_ids[r0:r1])[:, None] == np.asarray(self.kv_ids)[None, :]
        if r1 - r0 < 128:  # the last tile's rows past seq_q: nothing visible
            v = np.concatenate([v, np.zeros((128 - (r1 - r0), self.seq_k), bool)])
        return v


def bench_problems():
    """The benchmark cells (bf16, batch 1, 16 heads, hd128, seq 16384, all causal)."""
    s = 16384
    docs = [1 + i // 2048 for i in range(s)]
    return {
        "window (4096, 0)": BenchProblem(s, s, True, 4096, 0),
        "window (1024, 0)": BenchProblem(s, s, True, 1024, 0),
        "soft cap 30": BenchProblem(s, s, True, softcap=30.0),
        "sinks": BenchProblem(s, s, True, sinks=True),
        "8 documents of 2048": BenchProblem(s, s, True, q_ids=docs, kv_ids=docs),
    }


def check_bench_shapes(rng, sims=True, verbose=False):
    """Every m block's ranges at the benchmark shapes under the library's configuration and the
    other hd128 one (the harness runs both), the persistent deal with 132, 5 and 3 CTAs, and the
    protocol of a few CTAs' whole (or, with few CTAs, first 24) tile sequences and of one-tile
    CTAs at the band's both ends and in the middle."""
    runs = 0
    for name, p in bench_problems().items():
        kind = p.kind()
        # The sunk causal cell keeps the causal kernel; the capped one runs the variant kernel.
        assert kind == ("causal" if name == "sinks" else "variant"), (name, kind)
        lib = library_persistent(p, 128)
        for persistent in (False, True):
            cfg = fwd_config(128, kind, persistent)
            m_blocks = _cdiv(p.seq_q, cfg["m"])
            plan = tile_plan(cfg, p, range(m_blocks))
            counts = [e - b for b, e, _ in plan]
            if verbose:
                print(f"  {name:22s} [{cfg['name']}{' (library)' if persistent == lib else ''}] "
                      f"{m_blocks} tiles, key blocks per tile {min(counts)}..{max(counts)}")
            if not sims:
                continue
            if persistent:
                ascending = band_ascending(p, cfg["m"], cfg["n"])
                assert not ascending
                for ctas, take in ((132, 3), (5, 1), (3, 1)):
                    per_cta = cta_tiles(cfg, kind, m_blocks, 16, 1, ctas, 3, ascending)
                    for ms in per_cta[:take]:
                        tiles = ms if ctas == 132 else ms[:24]
                        simulate_persistent_tiles(cfg["W"], [plan[m] for m in tiles], cfg["stages"], rng)
                        runs += 1
            else:
                for m in (0, 1, 31, 32, 33, m_blocks // 2, m_blocks - 1):
                    simulate_persistent_tiles(cfg["W"], [plan[m]], cfg["stages"], rng)
                    runs += 1
    return runs


def main_variants(verbose=True):
    rng = random.Random(7)
    runs = 0
    # Random key ranges, WgSkip sub-ranges (both passes) and empty tiles.
    for W in (2, 3):
        for skip in (False, True):
            for _ in range(120):
                plan = random_range_plan(W, rng.randint(1, 6), rng.randint(1, 5), rng, skip)
                simulate_persistent_tiles(W, plan, rng.choice((2, 3)), rng)
                runs += 1
    runs += check_random_variants(rng)
    runs += check_bench_shapes(rng, verbose=verbose)
    variant_mutation_check()
    print(f"variant protocol model: {runs} random schedules over random ranges, random variant problems "
          f"and the benchmark shapes; every tile's ranges cover its visible keys")
    return runs


def variant_mutation_check():
    """The range model with a bug put in fails: pass_trailing_blocks releasing V(n) without waiting
    for it to fill, and a trailing pass that skips its token round (the issue-token ring falls out
    of step)."""
    full_source = open(__file__).read()
    cut = full_source.index("def variant_mutation_check")
    source, rest = full_source[:cut], full_source[cut:]  # mutate the simulation, not these patterns
    good_v = """                release("K")
                yield from wait_full("V", (t, n))
                release("V")
                yield"""
    good_tok = """            for n in range(mb - 1, begin - 1, -1):
                yield from sync(mine)
                sched[nxt].arrive()"""
    for good, bad in ((good_v, good_v.replace('                yield from wait_full("V", (t, n))\n', "")),
                      (good_tok, good_tok.split("\n")[0])):
        assert source.count(good) == 1, "the model's code under mutation moved"
        ns = {"__name__": "fwd_protocol_model_mutant"}
        exec(compile(source.replace(good, bad) + rest, "fwd_protocol_model_mutant", "exec"), ns)
        rng = random.Random(13)
        try:
            for _ in range(400):
                plan = ns["random_range_plan"](2, rng.randint(2, 5), rng.randint(2, 4), rng, True)
                ns["simulate_persistent_tiles"](2, plan, 2, rng, max_steps=20000)
        except AssertionError:
            continue
        raise AssertionError("the variant model did not see a bug put into pass_trailing_blocks")


_HOST_MASK_CPP = r"""
// common/mask.cuh compiled for the host, its device-only warp-collective narrowing included: 32
// threads play the lanes and __shfl_xor_sync is emulated with a barrier. Reads problems and
// queries from stdin, prints TileMask's answers (fwd_protocol_model.py compares them).
#include <algorithm>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#define __host__
#define __device__
#define __forceinline__ inline
static std::mutex g_m;
static std::condition_variable g_cv;
static int g_count = 0;
static long g_gen = 0;
static int g_vals[32];
static void lane_barrier() {
  std::unique_lock<std::mutex> l(g_m);
  const long gen = g_gen;
  if (++g_count == 32) {
    g_count = 0;
    ++g_gen;
    g_cv.notify_all();
  } else {
    g_cv.wait(l, [&] { return g_gen != gen; });
  }
}
static thread_local int t_lane = 0;
static int __shfl_xor_sync(unsigned, int v, int o) {
  g_vals[t_lane] = v;
  lane_barrier();
  const int r = g_vals[t_lane ^ o];
  lane_barrier();
  return r;
}
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
#define __CUDACC__ 1
#include "hopper/common/mask.cuh"

using namespace fa4::hopper;

struct Query { int r0, r1, c0, c1; };
struct Prob {
  int kind, seq_q, seq_k, left, right, has_q_len, q_len, has_kv_len, kv_len, has_ids;
  std::vector<int32_t> q_ids, kv_ids, q_ranges, kv_ranges;
  std::vector<Query> queries;
};

static std::vector<int32_t> ranges_of(const std::vector<int32_t>& ids) {
  std::vector<int32_t> r;
  for (size_t c = 0; c < ids.size(); c += kSegmentChunk) {
    int mn = INT_MAX, mx = INT_MIN;
    for (size_t i = c; i < std::min(ids.size(), c + kSegmentChunk); ++i) mn = std::min(mn, ids[i]), mx = std::max(mx, ids[i]);
    r.push_back(mn);
    r.push_back(mx);
  }
  return r;
}

template <MaskKind K>
static void answer(const Prob& p, const Query& q, int lane, std::string* out) {
  MaskArgs a{p.seq_q, p.seq_k, p.left, p.right, p.has_q_len ? &p.q_len : nullptr, p.has_kv_len ? &p.kv_len : nullptr,
             p.has_ids ? p.q_ids.data() : nullptr, p.has_ids ? p.kv_ids.data() : nullptr,
             p.has_ids ? p.q_ranges.data() : nullptr, p.has_ids ? p.kv_ranges.data() : nullptr};
  const TileMask<K> m = K == MaskKind::kVariant ? TileMask<K>(a, 0) : TileMask<K>(p.seq_q, p.seq_k);
  int lo, hi, nlo, nhi, b, e, rlo, rhi, rnlo, rnhi;
  m.key_span(q.r0, q.r1, &lo, &hi);
  nlo = lo, nhi = hi;
  m.narrow_keys_by_segment(q.r0, q.r1, &nlo, &nhi, lane);
  m.key_blocks(q.r0, q.r1, 128, &b, &e);
  m.row_span(q.c0, q.c1, &rlo, &rhi);
  rnlo = rlo, rnhi = rhi;
  m.narrow_rows_by_segment(q.c0, q.c1, &rnlo, &rnhi, lane);
  const int r1 = std::min(q.r1, p.seq_q);
  const int nm = q.r0 < r1 && q.c0 < q.c1 ? int(m.needs_mask(q.r0, r1, q.c0, q.c1)) : -1;
  int ulo = 0, uhi = 0;  // the uniform run of row r0's id over [c0, min(c1, kv_len))
  if (K == MaskKind::kVariant && p.has_ids && q.r0 < p.seq_q)
    m.uniform_key_run(q.c0, std::min(q.c1, m.kv_len), p.q_ids[q.r0], &ulo, &uhi, lane);
  char buf[192];
  std::snprintf(buf, sizeof buf, "%d %d %d %d %d %d %d %d %d %d %d %d %d\n", lo, hi, nlo, nhi, b, e, rlo, rhi, rnlo,
                rnhi, nm, ulo, uhi);
  if (lane == 0) *out += buf;
}

int main() {
  int np;
  if (std::scanf("%d", &np) != 1) return 1;
  std::vector<Prob> probs(np);
  for (Prob& p : probs) {
    int nq;
    std::scanf("%d %d %d %d %d %d %d %d %d %d %d", &p.kind, &p.seq_q, &p.seq_k, &p.left, &p.right, &p.has_q_len,
               &p.q_len, &p.has_kv_len, &p.kv_len, &p.has_ids, &nq);
    if (p.has_ids) {
      p.q_ids.resize(p.seq_q);
      p.kv_ids.resize(p.seq_k);
      for (auto& x : p.q_ids) std::scanf("%d", &x);
      for (auto& x : p.kv_ids) std::scanf("%d", &x);
      p.q_ranges = ranges_of(p.q_ids);
      p.kv_ranges = ranges_of(p.kv_ids);
    }
    p.queries.resize(nq);
    for (Query& q : p.queries) std::scanf("%d %d %d %d", &q.r0, &q.r1, &q.c0, &q.c1);
  }
  std::string out;
  std::vector<std::thread> lanes;
  for (int lane = 0; lane < 32; ++lane) {
    lanes.emplace_back([&, lane] {
      t_lane = lane;
      for (const Prob& p : probs)
        for (const Query& q : p.queries) {
          if (p.kind == 0) answer<MaskKind::kDense>(p, q, lane, &out);
          else if (p.kind == 1) answer<MaskKind::kCausal>(p, q, lane, &out);
          else answer<MaskKind::kVariant>(p, q, lane, &out);
        }
    });
  }
  for (auto& t : lanes) t.join();
  std::fputs(out.c_str(), stdout);
  return 0;
}
"""


def _row_span_py(mask, c0, c1):
    """TileMask::row_span and narrow_rows_by_segment (the backward's), for the comparison."""
    c1 = min(c1, mask.kv_len)
    if c0 >= c1:
        return (0, 0), (0, 0)

    def row_lo(j):
        if not mask.bounded_right():
            return 0
        return _clamp(j - mask.off - (0 if mask.kind == "causal" else mask.right), 0, mask.q_len)

    def row_hi(j):
        return _clamp(j - mask.off + mask.left + 1, 0, mask.q_len) if mask.bounded_left() else mask.q_len

    lo, hi = row_lo(c0), row_hi(c1 - 1)
    n = (lo, hi)
    if mask.kind == "variant" and mask.q_ids is not None and lo < hi:
        mn, mx = TileMask.id_hull(mask.kv_ranges, c0, min(c1, mask.kv_len))
        n = TileMask.narrow_by_hull(mask.q_ranges, mn, mx, lo, hi)
    return (lo, hi), n


def host_mask_check(rng=None, problems=80, cxx="g++"):
    """Compiles common/mask.cuh for the host (the C++ above) and compares key_span,
    narrow_keys_by_segment, key_blocks, row_span, narrow_rows_by_segment, needs_mask and
    uniform_key_run with the
    port on random problems (the bench shapes' band and documents among them). Returns the number
    of answers compared, or None when no C++ compiler is found."""
    import os
    import shutil
    import subprocess
    import tempfile

    if shutil.which(cxx) is None:
        print("host mask check: no C++ compiler, skipped")
        return None
    rng = rng or random.Random(11)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "cuda")
    probs = []
    for k in range(problems):
        p = random_problem(rng, 128)
        if k < 2:  # the benchmark's (1024, 0) band and 8 documents, at 1/4 scale
            s = 4096
            docs = [1 + i // 512 for i in range(s)]
            p = Problem(s, s, True, 1024, 0) if k == 0 else Problem(s, s, True, q_ids=docs, kv_ids=docs)
        elif k == 2:  # two documents whose whole chunks interleave: no uniform run
            p = Problem(1024, 1024, True, q_ids=INTERLEAVED_IDS, kv_ids=INTERLEAVED_IDS)
        kind = p.kind() if rng.random() < 0.8 else rng.choice(["dense", "causal"])
        if kind != "variant":  # the dense / causal kernels' policy: the shape and the causal flag
            p = Problem(p.seq_q, p.seq_k, kind == "causal")
        queries = []
        for _ in range(30):
            r0 = rng.randint(0, max(p.seq_q, 1) - 1)
            c0 = rng.randint(0, max(p.seq_k, 1) - 1) if p.seq_k else 0
            queries.append((r0, r0 + rng.choice([1, 63, 64, 128, 200]), c0, c0 + rng.choice([1, 64, 80, 128, 300])))
        probs.append((kind, p, queries))
    lines = [str(len(probs))]
    for kind, p, queries in probs:
        right = 0 if (p.causal and p.right > 0) else p.right
        lines.append(" ".join(map(str, [
            {"dense": 0, "causal": 1, "variant": 2}[kind], p.seq_q, p.seq_k, p.left, right,
            int(p.q_len_arg is not None), p.q_len_arg or 0, int(p.kv_len_arg is not None), p.kv_len_arg or 0,
            int(p.q_ids is not None), len(queries)])))
        if p.q_ids is not None:
            lines.append(" ".join(map(str, p.q_ids)))
            lines.append(" ".join(map(str, p.kv_ids)))
        for q in queries:
            lines.append(" ".join(map(str, q)))
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "mask_host.cc"), os.path.join(tmp, "mask_host")
        with open(src, "w") as f:
            f.write(_HOST_MASK_CPP)
        subprocess.run([cxx, "-std=c++17", "-O1", "-pthread", "-I" + root, src, "-o", exe], check=True)
        out = subprocess.run([exe], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True).stdout
    got = [tuple(map(int, line.split())) for line in out.splitlines()]
    want = []
    for kind, p, queries in probs:
        m = TileMask(kind, p)
        for r0, r1, c0, c1 in queries:
            lo, hi = m.key_span(r0, r1)
            nlo, nhi = m.narrow_keys_by_segment(r0, r1, lo, hi)
            b, e = TileMask.blocks_of(lo, hi, 128)
            (rlo, rhi), (rnlo, rnhi) = _row_span_py(m, c0, c1)
            r1c = min(r1, p.seq_q)
            nm = int(m.needs_mask(r0, r1c, c0, c1)) if r0 < r1c and c0 < c1 else -1
            ulo, uhi = 0, 0
            if kind == "variant" and p.q_ids is not None and r0 < p.seq_q:
                ulo, uhi = uniform_key_run(m, c0, min(c1, m.kv_len), p.q_ids[r0])
            want.append((lo, hi, nlo, nhi, b, e, rlo, rhi, rnlo, rnhi, nm, ulo, uhi))
    assert len(got) == len(want), (len(got), len(want))
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, f"answer {k}: mask.cuh {g}, model {w}"
    print(f"host mask check: {len(want)} answers of common/mask.cuh (compiled for the host, the narrowing "
          f"by 32 emulated lanes) equal the model's")
    return len(want)


if __name__ == "__main__":
    main()
    main_persistent()
