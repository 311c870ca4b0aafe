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


def simulate_persistent(W, n_blocks, tiles, stages, rng, skip=False, causal=False):
    """fwd_kernel_persistent: tiles through one CTA. The K/V rings and the issue-token ring run on
    across tiles; one Q buffer, which the producer refills for the next tile (after that tile's
    first K) once every warpgroup arrived on q_empty (after its last S = Q K^T of the tile, or
    right after its q_full wait when it computes no block); O through its own buffer per
    warpgroup, each store's read awaited before the warpgroup rewrites its rows. Every tile has
    n_blocks key blocks, or (causal) a random count in [0, n_blocks] (a tile whose rows see no key
    is skipped by producer and consumers alike). skip (WgSkip, warpgroup_block_count /
    pass_skipped_blocks): warpgroup c computes only blocks [0, n_mine[t][c]) and passes the others
    on; one random warpgroup (the one holding the tile's last valid row) computes all, the others
    any count from 0 up (the kernel's counts -- none past seq_q, the causal count of its own rows
    -- are special cases)."""
    nb = [rng.randint(0, n_blocks) if causal else n_blocks for _ in range(tiles)]
    n_mine = []
    for t in range(tiles):
        full_wg = rng.randrange(W)
        n_mine.append([nb[t] if (not skip or c == full_wg) else rng.randint(0, nb[t]) for c in range(W)])
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
            if nb[t] == 0:
                continue  # the consumers skip its Q barriers too
            n = nb[t] - 1
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
            while n > 0:
                yield from load("K", (t, n - 1))
                yield from load("V", (t, n))
                n -= 1
            yield from load("V", (t, 0))

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

        def release_q():  # after the tile's last S (block 0) retired
            q["readers"].discard(c)
            q_empty.arrive()

        mine, nxt = c, (c + 1) % W
        q_phase = 0  # the parity of q_full's next phase
        if c == W - 1:
            sched[0].arrive()
            yield
        for t in range(tiles):
            n_blocks, nm = nb[t], n_mine[t][c]
            if n_blocks > 0:
                while not q_full.done(q_phase):
                    yield
                q_phase ^= 1
                if nm > 0:
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
            # consume_tile: blocks nm - 1 down to 0; K(n) and V(n + 1) per step, V(0) at the end.
            if nm > 0:
                n = nm - 1
                yield from sync(mine)
                yield from wait_full("K", (t, n))
                sched[nxt].arrive()
                yield
                release("K")
                if n == 0:
                    release_q()
                yield
                for n in range(nm - 2, -1, -1):
                    yield from sync(mine)
                    yield from wait_full("K", (t, n))
                    yield from wait_full("V", (t, n + 1))
                    sched[nxt].arrive()
                    yield
                    release("K")
                    if n == 0:
                        release_q()
                    yield
                    release("V")
                    yield
                yield from wait_full("V", (t, 0))
                yield
                release("V")
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
        if steps > 200000:
            raise AssertionError(f"deadlock? alive {list(alive)}")
    for b in sched:
        assert b.arrived == 0, "named barrier left half-arrived"
    assert q_full.pending == 1 and q_empty.pending == W, "a Q barrier left half-arrived"


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


if __name__ == "__main__":
    main()
    main_persistent()
