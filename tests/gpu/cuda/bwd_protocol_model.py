"""Randomized interleaving model of the Hopper backward kernels' synchronization (no GPU needed).

Each role of one CTA (the loader thread, the TMA engine, the dQ writer warp, the two consumer
warpgroups, and in deterministic mode the neighbouring key blocks) is a Python generator that
yields (condition, action) pairs; a scheduler runs a random ready role each time, with random
per-role speeds, so many interleavings are tried. Modelled exactly: mbarrier phase parity
(try_wait.parity P passes iff the number of completed phases has parity != P, so a waiter two
phases behind hangs, as on the GPU), named barriers (bar.sync / bar.arrive thread counts,
generations), the order of wgmma issue / wait_group retirement, TMA completion in any order,
bulk-copy reads open until wait_group.read.

Kernels (the named configurations of cuda/hopper/bwd/config.cuh):
  'hd64'             bwd_kernel (kernel.cuh) for BwdHd64: producer.cuh's loads (K/V once, Q and dO
                     rings of two stages), mainloop.cuh's look-ahead consumer loop (S^T / dP^T
                     of the next step issued behind this step's dQ, dS^T double-buffered, one
                     Pds barrier per step, the last step's dQ peeled with no look-ahead after
                     it), stage_dq_tile and bwd_dq_writer (dq_writer.cuh: the shared float32 dQ
                     tile, one piece per consumer warpgroup with its own DqFull / DqEmpty, one
                     bulk reduce-add per piece).
  'hd64 det'         the same in deterministic mode: the writer's lane 0 waits until the
                     previous key block released the query block's semaphore, adds, waits for
                     the global writes (bulk_wait_all) and releases rank + 1.
  'hd64 persistent'  bwd_kernel_persistent for BwdHd64Persistent: the tile ids published by the
                     loader in two slots (tile_full / tile_empty, BwdPersistentScheduler in
                     scheduler.cuh) and read by both consumer warpgroups and the writer warp,
                     kv_full / kv_empty across tiles, the rings, the dS^T buffer parity and the
                     dQ handshakes running on across tiles (bwd_dq_writer_persistent). It has no
                     deterministic mode.
  'hd128', 'hd128 det', 'hd128 persistent'  the same kernels for BwdHd128 and
                     BwdHd128Persistent, whose consumers run the dQ-under-dK order
                     (BwdTile::dq_under_dk): per step S^T and dP^T, dV beside the dS^T store and
                     the Pds barrier, dQ, dO released once dV retired, dK, the dQ piece staged
                     once dQ retired, Q released once dK retired; nothing in flight across steps.
  'hd128 (80x128)', 'hd128 (80x128) det'  bwd_kernel for BwdHd128Rows80, in the dQ-under-dK order
                     with dQ^T issued once dV retired (BwdTile::dq_after_dv_retired): per step
                     S^T and dP^T, dV beside the dS store and the Pds barrier, dV retired and dO
                     released, dQ^T and dK, the dQ^T piece staged once dQ^T retired, Q released
                     once dK retired.
  'hd256'            bwd_kernel_kv80 for BwdHd256 (kernel_kv80.cuh): a Q ring of two stages, a dO
                     ring of one stage (dO(t) freed once dV^T(t) retired), P^T and dS^T through
                     double-buffered shared memory with one Pds barrier per step, dQ added by the
                     consumers (red.global), the dK/dV epilogue staged over the rings between two
                     Pds barriers.
  'hd256 det'        the same in deterministic mode: dq_tile_wait / dq_tile_signal
                     (dq_writer.cuh) around the adds, on the Dq named barrier.

Checked: no deadlock; every full-barrier wait sees the tile / step it expects in the stage; no
TMA write into a ring stage or K/V, and no store into a shared dQ tile, dS^T / P^T buffer or the
epilogue staging, while a read of it is open (the persistent loader issues nothing of the next
tile's K/V before kv_empty); every
named-barrier generation joins arrivals of one step; tile-id slots are rewritten only after every
reader read them; dQ of each step is added exactly once with both warpgroups' pieces; in
deterministic mode each semaphore release finds all of the step's adds landed, in step order.

Mutations (--mutate; each must make some trial fail, so the model does see that bug):
  hd64, hd128 and hd128 (80x128): 'no_dq_empty_wait' (the consumers store their dQ pieces without
  the DqEmpty bar.sync), 'no_wait_read' (the writer frees a dQ piece before the bulk engine read
  it), 'single_pds_buffer' (one dS^T buffer: a warpgroup's dS^T(t + 1) store would overwrite what
  the other's dQ(t) still reads, since the warpgroups meet only at the Pds barrier),
  'release_early' (det: the semaphore released before bulk_wait_all); hd128 also
  'q_release_before_dk' (Q's stage released before dK, which reads it, retired), as hd128
  (80x128); hd64 and hd128 persistent: 'kv_load_without_empty' (next tile's K/V loaded without
  the kv_empty wait), 'kv_empty_before_epilogue' (kv_empty arrived before the dK / dV staging in V was read back),
  'kv_empty_before_last_dq' (hd64: kv_empty arrived before the last step's dQ, which reads K,
  retired), 'kv_empty_before_last_step' (hd128: kv_empty arrived before the last step); hd256: 'single_pds_buffer', 'do_release_early' (dO freed before dV^T retired),
  'no_epilogue_barrier' (dK/dV staged over the rings without the first epilogue barrier),
  'release_early' (det: the semaphore released before the other warpgroup's adds are fenced).

Run: python3 tests/gpu/cuda/bwd_protocol_model.py [--mutate]  (exit 0 = all trials passed)
"""

import random
import sys


class Fail(Exception):
    pass


class MBar:
    def __init__(self, name, count):
        self.name, self.count, self.pending, self.phases, self.tx = name, count, count, 0, 0

    def ok(self, parity):
        return (self.phases & 1) != parity

    def arrive(self, tx=0):
        self.tx += tx
        self.pending -= 1
        self._maybe()

    def complete_tx(self, n):
        self.tx -= n
        self._maybe()

    def _maybe(self):
        if self.pending == 0 and self.tx == 0:
            self.phases += 1
            self.pending = self.count


class NamedBar:
    """bar.sync / bar.arrive with a thread count; arrivals carry a tag; a generation must be
    uniform."""

    def __init__(self, name, threads):
        self.name, self.threads, self.arrived, self.tags, self.gen = name, threads, 0, set(), 0

    def arrive(self, n, tag):
        self.arrived += n
        self.tags.add(tag)
        if self.arrived > self.threads:
            raise Fail(f"{self.name}: more than {self.threads} threads in one generation")
        if self.arrived == self.threads:
            if len(self.tags) != 1:
                raise Fail(f"{self.name}: generation mixes steps {sorted(self.tags, key=str)}")
            self.gen += 1
            self.arrived, self.tags = 0, set()


class Mem:
    """A shared-memory region: its content tag and the reads open on it."""

    def __init__(self, name):
        self.name, self.content, self.reads = name, None, set()

    def open(self, key):
        self.reads.add(key)

    def close(self, key):
        self.reads.discard(key)

    def write(self, content, who):
        if self.reads:
            raise Fail(f"{who} writes {self.name} while {sorted(self.reads, key=str)} read it")
        self.content = content


def named_sync(bar, n, tag):
    gen = bar.gen
    yield (lambda: True), (lambda: bar.arrive(n, tag))
    yield (lambda: bar.gen > gen), None


def wait_full(key, bars, mems, s, parity, step):
    """A consumer's mbarrier wait on a full barrier, then the check that the stage holds `step`."""

    def check():
        if mems[s].content != ("step", step):
            raise Fail(f"{key}: {mems[s].name} holds {mems[s].content}, step {step} expected")

    return (lambda: bars[s].ok(parity)), check


class Cta:
    """The state shared by the roles of one CTA: TMA in flight and the deterministic-mode
    neighbours (the previous key block releases each step's query block at random times, the next
    one checks that each release of this CTA finds the step's adds landed)."""

    def __init__(self, total_steps):
        self.pending_tma = []  # (region, content, barrier)
        self.total_steps = total_steps
        self.sem_turn = set()  # steps whose query block the previous key block released
        self.released = []  # (step, adds all landed?) in release order

    def tma(self, bar, mem, content):
        bar.arrive(tx=1)
        self.pending_tma.append((mem, content, bar))

    def tma_multi(self, bar, writes):
        """One arrival with the bytes of several regions (K and V under one kv_full)."""
        bar.arrive(tx=len(writes))
        for mem, content in writes:
            self.pending_tma.append((mem, content, bar))

    def predecessor(self):
        for g in range(self.total_steps):
            yield (lambda: True), (lambda gg=g: self.sem_turn.add(gg))

    def successor(self):
        for g in range(self.total_steps):
            yield (lambda gg=g: len(self.released) > gg), None
            step, landed = self.released[g]
            if step != g or not landed:
                raise Fail(f"semaphore of step {step} released with its dQ adds not all landed")

    def run(self, roles, rng):
        current = {name: None for name in roles}
        speed = {name: rng.expovariate(1.0) + 1e-3 for name in roles}
        active = dict(roles)
        while True:
            ready = []
            for name, gen in list(active.items()):
                if current[name] is None:
                    try:
                        current[name] = next(gen)
                    except StopIteration:
                        del active[name]
                        continue
                cond, _ = current[name]
                if cond():
                    ready.append(name)
            if not ready and not self.pending_tma:
                if active:
                    raise Fail(f"deadlock: blocked roles {sorted(active)}")
                return
            if self.pending_tma and (not ready or rng.random() < 0.3):
                mem, content, bar = self.pending_tma.pop(rng.randrange(len(self.pending_tma)))
                mem.write(content, "TMA")
                bar.complete_tx(1)
                continue
            # Random per-role speeds, redrawn now and then, so that one role can run far ahead of
            # another (a uniform choice almost never starves a role long enough to expose a race).
            if rng.random() < 0.02:
                for k in speed:
                    speed[k] = rng.expovariate(1.0) + 1e-3
            name = rng.choices(ready, weights=[speed[r] for r in ready])[0]
            _, act = current[name]
            current[name] = None
            if act:
                act()


# ---------------------------------------------------------------------------------------------
# hd64 / hd128: bwd_kernel and bwd_kernel_persistent (kernel.cuh, mainloop.cuh, dq_writer.cuh)
# ---------------------------------------------------------------------------------------------


def run_tile_kernel(rng, tiles_steps, persistent, det=False, mutate=None, stages=2, order="lookahead"):
    assert not (persistent and det), "the persistent kernel has no deterministic mode"
    n_tiles = len(tiles_steps)
    tile_base, g = [], 0
    for n in tiles_steps:
        tile_base.append(g)
        g += n
    total_steps = g
    cta = Cta(total_steps)
    kv_full = MBar("kv_full", 1)
    kv_empty = MBar("kv_empty", 8)  # lane 0 of each consumer warp
    tile_full = [MBar("tile_full0", 1), MBar("tile_full1", 1)]
    # every reader (2 consumer warpgroups + the writer warp: kReaders threads) frees a slot
    tile_empty = [MBar("tile_empty0", 3), MBar("tile_empty1", 3)]
    tile_ids = [None, None]
    reads_of_slot = {}  # iteration -> readers that read its id
    readers = ("c0", "c1", "w")
    q_full = [MBar(f"q_full{s}", 1) for s in range(stages)]
    d_full = [MBar(f"do_full{s}", 1) for s in range(stages)]
    q_empty = [MBar(f"q_empty{s}", 2) for s in range(stages)]
    d_empty = [MBar(f"do_empty{s}", 2) for s in range(stages)]
    q_mem = [Mem(f"Q stage {s}") for s in range(stages)]
    d_mem = [Mem(f"dO stage {s}") for s in range(stages)]
    # K (S^T reads a warpgroup's rows, dQ all of them) and each warpgroup's V rows (read by its
    # own dP^T only; its dK/dV epilogue stages there).
    k_mem = Mem("K")
    v_mem = [Mem("V rows 0"), Mem("V rows 1")]
    n_pds = 1 if mutate == "single_pds_buffer" else 2
    ds_mem = [Mem(f"dS^T buffer {b}") for b in range(n_pds)]
    # Each consumer warpgroup's piece of the shared dQ tile, with its own DqFull / DqEmpty
    # (that warpgroup's 128 threads + the writer warp's 32).
    dq_mem = [Mem("dQ piece 0"), Mem("dQ piece 1")]
    pds = NamedBar("Pds", 256)
    dq_fullb = [NamedBar("DqFull0", 160), NamedBar("DqFull1", 160)]
    dq_emptyb = [NamedBar("DqEmpty0", 160), NamedBar("DqEmpty1", 160)]
    dq_written = {}  # step -> consumer pieces staged
    dq_added = []
    gw_open = set()  # steps whose bulk reduce's global writes are in flight

    def loader():
        stage, phase, loads = 0, 0, 0
        ids = list(range(n_tiles)) + [-1] if persistent else [0]
        for it, tid in enumerate(ids):
            if persistent:
                # BwdPersistentScheduler::publish
                yield (lambda s=it % 2, p=((it >> 1) & 1) ^ 1: tile_empty[s].ok(p)), None
                if it >= 2:
                    missing = [r for r in readers if r not in reads_of_slot.get(it - 2, ())]
                    if missing:
                        raise Fail(
                            f"tile slot {it % 2} rewritten for iteration {it} before {missing} read it"
                        )
                tile_ids[it % 2] = tid
                reads_of_slot[it] = set()
                yield (lambda: True), (lambda s=it % 2: tile_full[s].arrive())
                if tid < 0:
                    return
            steps = tiles_steps[tid]
            if steps == 0:
                continue
            if persistent and mutate != "kv_load_without_empty":
                yield (lambda p=(loads & 1) ^ 1: kv_empty.ok(p)), None
            yield (
                (lambda: True),
                (
                    lambda t=tid: cta.tma_multi(
                        kv_full, [(k_mem, ("kv", t))] + [(v, ("kv", t)) for v in v_mem]
                    )
                ),
            )
            loads += 1
            for k in range(steps):  # bwd_load_rows
                gstep = tile_base[tid] + k
                for full, emp, mem in ((q_full, q_empty, q_mem), (d_full, d_empty, d_mem)):
                    yield (lambda e=emp[stage], p=phase ^ 1: e.ok(p)), None
                    yield (
                        (lambda: True),
                        (lambda f=full[stage], m=mem[stage], gg=gstep: cta.tma(f, m, ("step", gg))),
                    )
                stage += 1
                if stage == stages:
                    stage, phase = 0, phase ^ 1

    def read_tile_id(key, it):
        yield (lambda s=it % 2, p=(it >> 1) & 1: tile_full[s].ok(p)), None
        reads_of_slot[it].add(key)
        tile_empty[it % 2].arrive()

    def consumer(c):
        key = f"c{c}"
        stage, phase = 0, 0
        step0, kv_uses = 0, 0
        for it in range(n_tiles + 1 if persistent else 1):
            if persistent:
                yield from read_tile_id(key, it)
                tid = tile_ids[it % 2]
                if tid < 0:
                    return
            else:
                tid = 0
            steps = tiles_steps[tid]
            if steps == 0:
                continue  # S^T / dP^T of whatever the stages hold (never read), zero dK / dV
            yield (lambda p=kv_uses & 1: kv_full.ok(p)), None
            for mem in (k_mem, v_mem[c]):
                if mem.content != ("kv", tid):
                    raise Fail(f"{key}: K/V of tile {tid} expected, {mem.name} holds {mem.content}")
            kv_uses += 1
            if order in ("dq_under_dk", "dq_after_dv"):
                for k in range(steps):
                    g = step0 + k
                    if persistent and k == steps - 1 and mutate == "kv_empty_before_last_step":
                        yield (lambda: True), (lambda: [kv_empty.arrive() for _ in range(4)])
                        yield (lambda: True), None
                    yield from dq_under_dk_step(key, c, g, stage, phase)
                    stage, phase = (stage + 1) % stages, phase ^ (1 if stage + 1 == stages else 0)
                step0 += steps
                yield from epilogue(key, c, tid)
                continue
            # Prologue: C = S^T(step0) from Q's stage, D = dP^T(step0) from dO's.
            g = step0
            yield from issue_st(key, g, stage, phase)
            yield from issue_dpt(key, c, g, stage, phase)
            yield from scores_to_ds(key, c, g, stage)
            for k in range(steps):
                g = step0 + k
                has_next = k + 1 < steps
                # Group B: dQ(g) reads the whole dS^T buffer and K.
                buf = ds_mem[g % n_pds]
                buf.open((key, "B", g))
                k_mem.open((key, "B", g))
                nst, nph = (stage + 1) % stages, phase ^ (1 if stage + 1 == stages else 0)
                if has_next:
                    # Group C: S^T(g + 1) from Q's next stage. (The last step is peeled: its B
                    # alone, no look-ahead.)
                    yield from issue_st(key, g + 1, nst, nph)
                elif persistent and mutate == "kv_empty_before_last_dq":
                    yield (lambda: True), (lambda: [kv_empty.arrive() for _ in range(4)])
                    yield (lambda: True), None
                # wait<1> (the last step: wait<0>): B retired.
                buf.close((key, "B", g))
                k_mem.close((key, "B", g))
                # Release Q(g), dO(g).
                yield (lambda: True), (lambda s=stage: (q_empty[s].arrive(), d_empty[s].arrive()))
                stage, phase = nst, nph
                yield from stage_dq(key, c, g)
                if has_next:
                    # Group D: dP^T(g + 1).
                    yield from issue_dpt(key, c, g + 1, stage, phase)
                    yield from scores_to_ds(key, c, g + 1, stage)
            step0 += steps
            yield from epilogue(key, c, tid)

    def epilogue(key, c, tid):
        # Epilogue (store_dkv_rows): each warp stages dV, then dK, in its warpgroup's V rows
        # and reads them back; kv_empty after the read-back (one arrival per warp).
        if persistent and mutate == "kv_empty_before_epilogue":
            yield (lambda: True), (lambda: [kv_empty.arrive() for _ in range(4)])
        for part in ("dV", "dK"):
            yield (lambda: True), (lambda p=part, t=tid: v_mem[c].write(("epi", p, t), key))
            v_mem[c].open((key, "epi", part))
            yield (lambda: True), None
            if v_mem[c].content != ("epi", part, tid):
                raise Fail(
                    f"{key}: staged {part} of tile {tid} overwritten by {v_mem[c].content}"
                )
            v_mem[c].close((key, "epi", part))
        if persistent and mutate not in (
            "kv_empty_before_last_dq",
            "kv_empty_before_epilogue",
            "kv_empty_before_last_step",
        ):
            yield (lambda: True), (lambda: [kv_empty.arrive() for _ in range(4)])

    def stage_dq(key, c, g):
        # stage_dq_tile: bar.sync its DqEmpty, its piece into the shared tile, bar.arrive its
        # DqFull.
        if mutate == "no_dq_empty_wait":
            yield (lambda: True), (lambda gg=g: dq_emptyb[c].arrive(128, gg))
        else:
            yield from named_sync(dq_emptyb[c], 128, g)
        dq_mem[c].write(("dq", g), key)
        dq_written.setdefault(g, set()).add(c)
        yield (lambda: True), (lambda gg=g: dq_fullb[c].arrive(128, gg))

    def issue_st(key, g, st, ph):
        # S^T(g) (group C): waits for Q's stage st, then reads it and K.
        yield wait_full(key, q_full, q_mem, st, ph, g)
        q_mem[st].open((key, "C", g))
        k_mem.open((key, "C", g))

    def issue_dpt(key, c, g, st, ph):
        # dP^T(g) (group D): waits for dO's stage st, then reads it and this warpgroup's V rows.
        yield wait_full(key, d_full, d_mem, st, ph, g)
        d_mem[st].open((key, "D", g))
        v_mem[c].open((key, "D", g))

    def dq_under_dk_step(key, c, g, st, ph):
        # S^T(g) (C) and dP^T(g) (D) from the stages; wait<1>, wait<0>: both retired (P, dS).
        yield from issue_st(key, g, st, ph)
        yield from issue_dpt(key, c, g, st, ph)
        yield (lambda: True), None
        for mem, r in ((q_mem[st], "C"), (k_mem, "C"), (d_mem[st], "D"), (v_mem[c], "D")):
            mem.close((key, r, g))
        # dV (RS: reads dO), the dS^T store, the Pds barrier.
        d_mem[st].open((key, "dV", g))
        buf = ds_mem[g % n_pds]
        buf.write(("dS", g, c), key)
        yield from named_sync(pds, 128, g)
        if order == "dq_after_dv":
            # wait<0>: dV retired, dO(g) released; then dQ^T(g) reads the whole dS buffer and K.
            d_mem[st].close((key, "dV", g))
            yield (lambda: True), (lambda: d_empty[st].arrive())
            buf.open((key, "B", g))
            k_mem.open((key, "B", g))
        else:
            # dQ(g) reads the whole dS^T buffer and K; wait<1>: dV retired, dO(g) released.
            buf.open((key, "B", g))
            k_mem.open((key, "B", g))
            yield (lambda: True), None
            d_mem[st].close((key, "dV", g))
            yield (lambda: True), (lambda: d_empty[st].arrive())
        # dK (RS: reads Q); wait<1>: dQ retired, its piece staged under dK.
        q_mem[st].open((key, "dK", g))
        yield (lambda: True), None
        buf.close((key, "B", g))
        k_mem.close((key, "B", g))
        yield from stage_dq(key, c, g)
        # wait<0>: dK retired, Q(g) released.
        if mutate == "q_release_before_dk":
            yield (lambda: True), (lambda: q_empty[st].arrive())
            yield (lambda: True), None
        q_mem[st].close((key, "dK", g))
        if mutate != "q_release_before_dk":
            yield (lambda: True), (lambda: q_empty[st].arrive())

    def scores_to_ds(key, c, g, st):
        # wait<1>: C retired, P^T; wait<0>: D retired, dS^T. Group A: dV += P^T dO, dK += dS^T Q
        # (RS: P^T / dS^T from registers), then dS^T stored, the Pds barrier, wait<0>: A retired.
        for mem, r in ((q_mem[st], "C"), (k_mem, "C"), (d_mem[st], "D"), (v_mem[c], "D")):
            mem.close((key, r, g))
        q_mem[st].open((key, "A", g))
        d_mem[st].open((key, "A", g))
        ds_mem[g % n_pds].write(("dS", g, c), key)
        yield from named_sync(pds, 128, g)
        q_mem[st].close((key, "A", g))
        d_mem[st].close((key, "A", g))

    def writer():
        it = 0
        if persistent:
            yield from read_tile_id("w", 0)
            tid = tile_ids[0]
            if tid < 0:
                return
        else:
            tid = 0
            if tiles_steps[0] == 0:
                return
        # the pre-arrivals (dq_pieces_free)
        yield (lambda: True), (lambda: [e.arrive(32, 0) for e in dq_emptyb])
        while True:
            steps = tiles_steps[tid]
            nxt = -1
            for k in range(steps):
                g = tile_base[tid] + k
                more = True
                for w in (0, 1):
                    yield from named_sync(dq_fullb[w], 32, g)
                    if dq_mem[w].content != ("dq", g) or w not in dq_written.get(g, ()):
                        raise Fail(
                            f"writer: step {g} dQ piece {w} holds {dq_mem[w].content}, "
                            f"pieces {dq_written.get(g)}"
                        )
                    if det and w == 0:
                        yield (lambda gg=g: gg in cta.sem_turn), None  # lane 0: ld.acquire spin
                    # bulk_reduce_add_f32 of the piece: the bulk engine reads it, the global adds
                    # land later.
                    dq_mem[w].open(("w", g))
                    dq_added.append((g, w))
                    gw_open.add((g, w))
                    yield (lambda: True), None
                    if det and w == 1:
                        if mutate == "release_early":
                            cta.released.append(
                                (g, (g, 0) not in gw_open and (g, 1) not in gw_open)
                            )
                            yield (lambda: True), None
                            gw_open.difference_update({(g, 0), (g, 1)})
                            dq_mem[1].close(("w", g))
                        else:
                            # bulk_wait_all: both pieces read and their global writes done;
                            # st.release.
                            gw_open.difference_update({(g, 0), (g, 1)})
                            dq_mem[1].close(("w", g))
                            cta.released.append(
                                (g, (g, 0) not in gw_open and (g, 1) not in gw_open)
                            )
                    if w == 0 and k == steps - 1:
                        if persistent:
                            # peek at the next tile id: is this the CTA's last step?
                            yield from read_tile_id("w", it + 1)
                            nxt = tile_ids[(it + 1) % 2]
                            more = nxt >= 0
                        else:
                            more = False
                    if more:  # dq_piece_free
                        if mutate == "no_wait_read":
                            yield (
                                (lambda: True),
                                (lambda ww=w, gg=g: dq_emptyb[ww].arrive(32, gg + 1)),
                            )
                            yield (lambda: True), None
                            dq_mem[w].close(("w", g))
                        else:
                            dq_mem[w].close(("w", g))  # bulk_wait_read
                            yield (
                                (lambda: True),
                                (lambda ww=w, gg=g: dq_emptyb[ww].arrive(32, gg + 1)),
                            )
            it += 1
            if nxt < 0:
                break
            tid = nxt
        # bulk_wait_all before the CTA exits.
        gw_open.clear()
        for g in range(total_steps):
            for m in dq_mem:
                m.close(("w", g))

    roles = {"loader": loader(), "c0": consumer(0), "c1": consumer(1), "w": writer()}
    if det:
        roles["pred"] = cta.predecessor()
        roles["succ"] = cta.successor()
    cta.run(roles, rng)
    if sorted(dq_added) != [(g, w) for g in range(total_steps) for w in (0, 1)]:
        raise Fail(
            f"dQ added for {dq_added}, expected each piece of steps 0..{total_steps - 1} once"
        )
    if det and [g for g, _ in cta.released] != list(range(total_steps)):
        raise Fail(
            f"semaphore releases {cta.released}, expected steps 0..{total_steps - 1} in order"
        )
    if any(b.arrived for b in dq_emptyb + dq_fullb) or pds.arrived:
        raise Fail("a named barrier generation is left open at exit")


# ---------------------------------------------------------------------------------------------
# hd256: bwd_kernel_kv80 (kernel_kv80.cuh)
# ---------------------------------------------------------------------------------------------


def run_kv80_kernel(rng, steps, det=False, mutate=None):
    cta = Cta(steps)
    kv_full = MBar("kv_full", 1)
    q_full = [MBar(f"q_full{s}", 1) for s in range(2)]
    q_empty = [MBar(f"q_empty{s}", 2) for s in range(2)]
    d_full = [MBar("do_full0", 1)]
    d_empty = [MBar("do_empty0", 2)]
    q_mem = [Mem(f"Q stage {s}") for s in range(2)]
    d_mem = [Mem("dO stage 0")]
    kv_mem = Mem("K/V")
    n_pds = 1 if mutate == "single_pds_buffer" else 2
    # P^T and dS^T buffers [80 keys][64 queries]: warpgroup c stores keys 40c .. 40c + 39.
    pt_mem = [[Mem(f"P^T buffer {b} keys {40 * c}..") for c in range(2)] for b in range(n_pds)]
    dst_mem = [[Mem(f"dS^T buffer {b} keys {40 * c}..") for c in range(2)] for b in range(n_pds)]
    pds = NamedBar("Pds", 256)
    dqb = NamedBar("Dq", 256)
    added = {}  # step -> (warpgroup, piece) added
    in_flight = set()  # (step, warpgroup, piece) red.global adds not yet fenced
    staged = set()

    def loader():
        if steps == 0:
            return
        yield (lambda: True), (lambda: cta.tma(kv_full, kv_mem, "kv"))
        qst, qph, dph = 0, 0, 0
        for t in range(steps):  # bwd_load_tile: Q(t) into its ring, then dO(t) into its one stage
            yield (lambda s=qst, p=qph ^ 1: q_empty[s].ok(p)), None
            yield (lambda: True), (lambda s=qst, tt=t: cta.tma(q_full[s], q_mem[s], ("step", tt)))
            yield (lambda p=dph ^ 1: d_empty[0].ok(p)), None
            yield (lambda: True), (lambda tt=t: cta.tma(d_full[0], d_mem[0], ("step", tt)))
            qst += 1
            if qst == 2:
                qst, qph = 0, qph ^ 1
            dph ^= 1

    def consumer(c):
        key = f"c{c}"
        qst, qph, dph = 0, 0, 0
        if steps:
            yield (lambda: kv_full.ok(0)), None
        for t in range(steps):
            b = t % n_pds
            # S = Q K^T, dP = dO V^T (this warpgroup's 40 keys).
            yield wait_full(key, q_full, q_mem, qst, qph, t)
            q_mem[qst].open((key, "S", t))
            kv_mem.open((key, "S", t))
            yield wait_full(key, d_full, d_mem, 0, dph, t)
            d_mem[0].open((key, "dP", t))
            kv_mem.open((key, "dP", t))
            # wait<1>: S retired; P^T stored. wait<0>: dP retired; dS^T stored.
            q_mem[qst].close((key, "S", t))
            kv_mem.close((key, "S", t))
            pt_mem[b][c].write(("P", t), key)
            yield (lambda: True), None
            d_mem[0].close((key, "dP", t))
            kv_mem.close((key, "dP", t))
            dst_mem[b][c].write(("dS", t), key)
            yield from named_sync(pds, 128, t)
            for mem, want in (
                (pt_mem[b][0], "P"),
                (pt_mem[b][1], "P"),
                (dst_mem[b][0], "dS"),
                (dst_mem[b][1], "dS"),
            ):
                if mem.content != (want, t):
                    raise Fail(f"{key}: {mem.name} holds {mem.content} at step {t}")
            # Group 1: dV^T (dO, all 80 keys of P^T). Group 2: dK^T (Q, dS^T), dQ^T piece 0 (K, dS^T).
            group1 = [(d_mem[0], "dV"), (pt_mem[b][0], "dV"), (pt_mem[b][1], "dV")]
            group2 = [
                (q_mem[qst], "dK"),
                (dst_mem[b][0], "dK"),
                (dst_mem[b][1], "dK"),
                (kv_mem, "dK"),
            ]
            for mem, r in group1 + group2:
                mem.open((key, r, t))
            if mutate == "do_release_early":
                yield (lambda: True), (lambda: d_empty[0].arrive())
            yield (lambda: True), None  # the wgmmas run while the other roles move on
            for mem, r in group1:  # wait<1>
                mem.close((key, r, t))
            if mutate != "do_release_early":
                yield (lambda: True), (lambda: d_empty[0].arrive())
            yield (lambda: True), None
            for mem, r in group2:  # wait<0>
                mem.close((key, r, t))
            yield (lambda: True), (lambda s=qst: q_empty[s].arrive())
            qst += 1
            if qst == 2:
                qst, qph = 0, qph ^ 1
            dph ^= 1
            if det:  # dq_tile_wait
                if c == 0:
                    yield (lambda tt=t: tt in cta.sem_turn), None
                yield from named_sync(dqb, 128, ("wait", t))
            for piece in range(2):
                if piece == 1:  # dQ^T piece 1 (K, dS^T), wait<0>
                    for mem in (kv_mem, dst_mem[b][0], dst_mem[b][1]):
                        mem.open((key, "dQ", t))
                    yield (lambda: True), None
                    for mem in (kv_mem, dst_mem[b][0], dst_mem[b][1]):
                        mem.close((key, "dQ", t))
                added.setdefault(t, set()).add((c, piece))
                in_flight.add((t, c, piece))
                yield (lambda: True), None
            if det:  # dq_tile_signal: __threadfence, bar.sync, the release by one thread
                in_flight.difference_update({(t, c, 0), (t, c, 1)})

                def landed(tt=t):
                    return len(added[tt]) == 4 and not any(x[0] == tt for x in in_flight)

                if mutate == "release_early" and c == 0:
                    cta.released.append((t, landed()))
                yield from named_sync(dqb, 128, ("signal", t))
                if mutate != "release_early" and c == 0:
                    cta.released.append((t, landed()))
        # Epilogue: dK^T / dV^T staged transposed over the Q / dO rings, then written out.
        if mutate != "no_epilogue_barrier":
            yield from named_sync(pds, 128, "epilogue")
        for mem in (q_mem[0], q_mem[1], d_mem[0]):
            if any(m is mem for m, _, _ in cta.pending_tma):
                raise Fail(
                    f"{key}: dK/dV staging over {mem.name} with a TMA load into it in flight"
                )
            mem.write(("epilogue", c), key)
        staged.add(c)
        if mutate == "no_epilogue_barrier":
            yield from named_sync(pds, 128, "epilogue")
        yield from named_sync(pds, 128, "epilogue rows")
        if staged != {0, 1}:
            raise Fail(f"{key}: writes the dK/dV rows with only {sorted(staged)} staged")

    roles = {"loader": loader(), "c0": consumer(0), "c1": consumer(1)}
    if det:
        roles["pred"] = cta.predecessor()
        roles["succ"] = cta.successor()
    cta.run(roles, rng)
    for t in range(steps):
        if added.get(t) != {(0, 0), (0, 1), (1, 0), (1, 1)}:
            raise Fail(f"step {t}: dQ pieces added {added.get(t)}")
    if det and [g for g, _ in cta.released] != list(range(steps)):
        raise Fail(f"semaphore releases {cta.released}, expected steps 0..{steps - 1} in order")
    if pds.arrived or dqb.arrived:
        raise Fail("a named barrier generation is left open at exit")


# ---------------------------------------------------------------------------------------------

PERSISTENT_TILES = [[1], [1, 1], [2, 1, 1, 3], [1, 1, 1, 1, 1], [4, 2, 6], [3, 1, 2, 1, 5, 1]]

KERNELS = {
    # name: (trial(rng, tiles, mutate), tile-step lists tried). The look-ahead order: hd64 on
    # bwd_kernel, hd64 persistent; dQ under dK: hd128, hd128 persistent and (dQ^T after dV
    # retired) hd128 (80x128) (BwdTile::dq_under_dk, dq_after_dv_retired).
    "hd64": (
        lambda rng, t, m=None: run_tile_kernel(rng, t, False, mutate=m),
        [[0], [1], [2], [3], [7]],
    ),
    "hd64 det": (
        lambda rng, t, m=None: run_tile_kernel(rng, t, False, True, m),
        [[1], [2], [5], [9]],
    ),
    "hd64 persistent": (
        lambda rng, t, m=None: run_tile_kernel(rng, t, True, mutate=m),
        PERSISTENT_TILES,
    ),
    "hd128": (
        lambda rng, t, m=None: run_tile_kernel(rng, t, False, mutate=m, order="dq_under_dk"),
        [[0], [1], [2], [3], [7]],
    ),
    "hd128 det": (
        lambda rng, t, m=None: run_tile_kernel(rng, t, False, True, m, order="dq_under_dk"),
        [[1], [2], [5], [9]],
    ),
    "hd128 persistent": (
        lambda rng, t, m=None: run_tile_kernel(rng, t, True, mutate=m, order="dq_under_dk"),
        PERSISTENT_TILES,
    ),
    "hd128 (80x128)": (
        lambda rng, t, m=None: run_tile_kernel(rng, t, False, mutate=m, order="dq_after_dv"),
        [[0], [1], [2], [3], [7]],
    ),
    "hd128 (80x128) det": (
        lambda rng, t, m=None: run_tile_kernel(rng, t, False, True, m, order="dq_after_dv"),
        [[1], [2], [5], [9]],
    ),
    "hd256": (
        lambda rng, t, m=None: run_kv80_kernel(rng, t[0], mutate=m),
        [[0], [1], [2], [5], [9]],
    ),
    "hd256 det": (lambda rng, t, m=None: run_kv80_kernel(rng, t[0], True, m), [[1], [2], [5], [9]]),
}

MUTATIONS = (
    ("hd64", "no_dq_empty_wait"),
    ("hd64", "no_wait_read"),
    ("hd64", "single_pds_buffer"),
    ("hd64 det", "release_early"),
    ("hd64 persistent", "kv_load_without_empty"),
    ("hd64 persistent", "kv_empty_before_last_dq"),
    ("hd64 persistent", "kv_empty_before_epilogue"),
    ("hd128", "no_dq_empty_wait"),
    ("hd128", "single_pds_buffer"),
    ("hd128", "q_release_before_dk"),
    ("hd128", "no_wait_read"),
    ("hd128 det", "release_early"),
    ("hd128 (80x128)", "no_dq_empty_wait"),
    ("hd128 (80x128)", "single_pds_buffer"),
    ("hd128 (80x128)", "q_release_before_dk"),
    ("hd128 (80x128) det", "release_early"),
    ("hd128 persistent", "kv_load_without_empty"),
    ("hd128 persistent", "kv_empty_before_epilogue"),
    ("hd128 persistent", "kv_empty_before_last_step"),
    ("hd256", "single_pds_buffer"),
    ("hd256", "do_release_early"),
    ("hd256", "no_epilogue_barrier"),
    ("hd256 det", "release_early"),
)


def mutation_check(rng, trials=600):
    """Each mutation must make some trial fail (else the model would not notice that bug)."""
    ok = True
    for kernel, mutate in MUTATIONS:
        trial, tiles_choices = KERNELS[kernel]
        caught = None
        for _ in range(trials):
            try:
                trial(rng, rng.choice([t for t in tiles_choices if sum(t) >= 2]), mutate)
            except Fail as e:
                caught = e
                break
        print(f"mutation {kernel}/{mutate}: {'caught: ' + str(caught) if caught else 'NOT CAUGHT'}")
        ok = ok and caught is not None
    return ok


def main(trials=300):
    rng = random.Random(1)
    if "--mutate" in sys.argv:
        return 0 if mutation_check(rng) else 1
    failures = 0
    for kernel, (trial, tiles_choices) in KERNELS.items():
        n = 0
        for tiles in tiles_choices:
            for _ in range(trials):
                n += 1
                try:
                    trial(rng, tiles)
                except Fail as e:
                    failures += 1
                    print(f"FAIL {kernel} tile steps {tiles}: {e}")
                    break
        print(f"{kernel}: {n} random interleavings")
    print("protocol model:", "FAIL" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
