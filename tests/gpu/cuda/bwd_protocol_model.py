"""Randomized interleaving model of the Hopper backward kernel's synchronization (bwd v3 variants;
no GPU needed). Each role of one CTA (loader thread, TMA engine, dQ writer warp, two consumer
warpgroups) is a Python generator that yields (condition, action) pairs; a scheduler runs a random
ready role each time, so many interleavings are tried. Modelled exactly: mbarrier phase parity
(try_wait.parity P passes iff the number of completed phases has parity != P, so a waiter two phases
behind hangs, as on the GPU), named barriers (bar.sync / bar.arrive thread counts, generations), the
order of wgmma issue / wait_group retirement, TMA completion in any order, bulk-copy reads open
until wait_group.read.

Checked: no deadlock; every full-barrier wait sees the tile/step it expects in the stage; no TMA
write into a ring stage, K/V, or a shared dQ tile / P^T-dS^T buffer while a read of it that is
still needed is open (the persistent look-ahead's discarded reads are counted, not failed); every
named-barrier generation joins arrivals of one step; tile-id slots are rewritten only after every
reader read them; the writer adds each step's dQ exactly once, with both warpgroups' pieces of
that step.

Models: 'v11' = PipelineScores + DqViaTma + Persistent (bwd_kernel_persistent: tile ids, kv_full /
kv_empty, ring and DqFull/DqEmpty across tiles); 'v4' = DqInRing on the v1 schedule (dQ in the
ring stages, writer frees the stage, barrier ids by step parity); 'v12' = v4 + Persistent (the
ring writer reads the tile ids too); 'v3' = V3 non-persistent.
bwd v4 candidates (hd256): 'v4det' = v4 in deterministic mode (the ring writer's semaphore
handshake: spin until the predecessor key block released the query block, the bulk adds,
wait_group.read and free the ring stage (as in the default mode), then wait_group 0 -- the global
writes done -- and release rank + 1;
the predecessor is an independent role that releases the steps in order at random times, a
successor role checks every release finds the adds landed); 'v20' = SplitSdP (warpgroup 0: S^T
and P^T -> P^T buffer; named barrier PReady (bar.sync, both); both issue dV from the P^T buffer;
warpgroup 1 reads P^T back, writes dS^T; Pds; dK, dQ; DqInRing staging); 'v20det' = both;
'v52' / 'v52det' = v20 + ScoresAhead (each warpgroup's next-step scores read the other ring
stage from between its two dQ staging halves until after its ring-barrier arrival; after the last
step without a full-barrier wait, a discarded read).
Mutations (--mutate, each must FAIL): 'release_early' (semaphore released after wait_group.read
only), 'free_before_turn' (ring stage freed before the semaphore wait), 'no_pready' (warpgroup 1
reads P^T without the PReady barrier), 'single_pds_buffer' (one P^T / dS^T buffer),
'ahead_same_stage' (v52's look-ahead reads this step's stage instead of the next).

Run: python3 tests/gpu/cuda/bwd_protocol_model.py  (exit 0 = all trials passed)
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
                raise Fail(f"{self.name}: generation mixes steps {sorted(self.tags)}")
            self.gen += 1
            self.arrived, self.tags = 0, set()


class Mem:
    """A shared-memory region: its content tag and the reads open on it."""

    def __init__(self, name):
        self.name, self.content, self.reads = name, None, {}  # reader key -> needed?

    def open(self, key, needed=True):
        self.reads[key] = needed

    def close(self, key):
        self.reads.pop(key, None)

    def write(self, content, stats, who):
        needed = [k for k, v in self.reads.items() if v]
        if needed:
            raise Fail(f"{who} writes {self.name} while {needed} still read it")
        if self.reads:
            stats["discarded_races"] = stats.get("discarded_races", 0) + 1
        self.content = content


def run_trial(model, rng, tiles_steps, stages=2, mutate=None):
    persistent = model in ("v11", "v12")
    ring_in_dq = model in ("v4", "v12", "v4det", "v20", "v20det", "v52", "v52det")
    split = model in ("v20", "v20det", "v52", "v52det")
    ahead = model in ("v52", "v52det")  # ScoresAhead: next step's scores during the dQ staging
    det = model in ("v4det", "v20det", "v52det")
    stats = {}
    n_tiles = len(tiles_steps)
    # --- shared state
    kv_full = MBar("kv_full", 1)
    kv_empty = MBar("kv_empty", 2)
    tile_full = [MBar("tile_full0", 1), MBar("tile_full1", 1)]
    # every reader (2 consumer warpgroups + the writer warp) frees a slot after reading it
    tile_empty = [MBar("tile_empty0", 3), MBar("tile_empty1", 3)]
    tile_ids = [None, None]
    reads_of_slot = {}  # iteration -> set of readers that read it
    readers = ["c0", "c1", "w"]
    q_full = [MBar(f"q_full{s}", 1) for s in range(stages)]
    d_full = [MBar(f"do_full{s}", 1) for s in range(stages)]
    empty_count = 1 if ring_in_dq else 2
    q_empty = [MBar(f"q_empty{s}", empty_count) for s in range(stages)]
    d_empty = [MBar(f"do_empty{s}", empty_count) for s in range(stages)]
    q_mem = [Mem(f"Q stage {s}") for s in range(stages)]
    d_mem = [Mem(f"dO stage {s}") for s in range(stages)]
    kv_mem = Mem("K/V")
    ds_mem = [Mem("dS buf 0"), Mem("dS buf 1")]
    p_mem = [Mem("P buf 0"), Mem("P buf 1")]  # SplitSdP: P^T goes through shared memory
    n_pds = 1 if mutate == "single_pds_buffer" else 2
    pready = NamedBar("PReady", 256)
    # Deterministic mode: sem_turn[g] = the predecessor key block released step g's query block;
    # gw_open = steps whose bulk adds' global writes are still in flight; released = steps this
    # CTA released to its successor.
    sem_turn = {}
    gw_open = set()
    released = []
    dq_mem = Mem("dQ smem tile")
    pds = NamedBar("Pds", 256)
    dq_fullb = NamedBar("DqFull", 288)
    dq_emptyb = NamedBar("DqEmpty", 288)
    ring_bars = [NamedBar("DqRing0", 288), NamedBar("DqRing1", 288)]
    pending_tma = []  # (region, content, barrier, bytes)
    dq_written = {}  # global step -> set of consumer pieces
    dq_added = []
    total_steps = sum(tiles_steps)

    def step_tiles():
        g = 0
        for t, n in enumerate(tiles_steps):
            yield t, g, n
            g += n

    tile_base = {t: g for t, g, n in step_tiles()}

    # --- roles
    def loader():
        stage, phase, loads = 0, 0, 0
        ids = list(range(n_tiles)) if persistent else [0]
        it = 0
        for tid in ids + ([-1] if persistent else []):
            if persistent:
                yield (lambda s=it % 2, p=((it >> 1) & 1) ^ 1: tile_empty[s].ok(p)), None
                if it >= 2:
                    missing = [r for r in readers if r not in reads_of_slot.get(it - 2, set())]
                    if missing:
                        raise Fail(
                            f"tile slot {it % 2} rewritten for iteration {it} "
                            f"before {missing} read it"
                        )
                tile_ids[it % 2] = tid
                reads_of_slot.setdefault(it, set())
                yield (lambda: True), (lambda s=it % 2: tile_full[s].arrive())
                it += 1
                if tid < 0:
                    return
            steps = tiles_steps[tid]
            yield (lambda p=(loads & 1) ^ 1: kv_empty.ok(p)), None
            yield (
                (lambda: True),
                (
                    lambda t=tid: (
                        kv_full.arrive(tx=1),
                        pending_tma.append((kv_mem, ("kv", t), kv_full)),
                    )
                ),
            )
            loads += 1
            for k in range(steps):
                gstep = tile_base[tid] + k
                for full, emp, mem in ((q_full, q_empty, q_mem), (d_full, d_empty, d_mem)):
                    yield (lambda e=emp[stage], p=phase ^ 1: e.ok(p)), None
                    yield (
                        (lambda: True),
                        (
                            lambda f=full[stage], m=mem[stage], g=gstep: (
                                f.arrive(tx=1),
                                pending_tma.append((m, ("step", g), f)),
                            )
                        ),
                    )
                stage += 1
                if stage == stages:
                    stage, phase = 0, phase ^ 1

    def tma_engine():
        while True:
            yield (lambda: bool(pending_tma) or done_flag[0]), None
            if not pending_tma:
                return
            i = rng.randrange(len(pending_tma))
            mem, content, bar = pending_tma.pop(i)
            mem.write(content, stats, "TMA")
            bar.complete_tx(1)

    done_flag = [False]

    def consumer(c):
        key = f"c{c}"
        stage, phase = 0, 0
        step0, kv_uses, it = 0, 0, 0
        tiles_iter = iter(range(n_tiles)) if persistent else iter([0])
        while True:
            if persistent:
                yield (lambda s=it % 2, p=(it >> 1) & 1: tile_full[s].ok(p)), None
                tid = tile_ids[it % 2]
                reads_of_slot[it].add(key)
                tile_empty[it % 2].arrive()
                it += 1
                if tid < 0:
                    return
            else:
                tid = next(tiles_iter, None)
                if tid is None:
                    return
            steps = tiles_steps[tid]
            yield (lambda p=kv_uses & 1: kv_full.ok(p)), None
            if kv_mem.content != ("kv", tid):
                raise Fail(f"{key}: K/V of tile {tid} expected, stage holds {kv_mem.content}")
            kv_uses += 1

            def wait_full(full, mem, s, p, g):
                return (lambda: full[s].ok(p)), (lambda: check(mem[s], g))

            def check(mem, g):
                if mem.content != ("step", g):
                    raise Fail(f"{key}: {mem.name} holds {mem.content}, step {g} expected")

            if not ring_in_dq:
                # pipelined schedule (PipelineScores), DqViaTma
                g = step0
                # prologue: C, D of step 0
                yield wait_full(q_full, q_mem, stage, phase, g)
                q_mem[stage].open((key, "C", g))
                kv_mem.open((key, "C", g))
                yield wait_full(d_full, d_mem, stage, phase, g)
                d_mem[stage].open((key, "D", g))
                kv_mem.open((key, "D", g))

                yield from scores_to_ds_sync(
                    key, c, g, stage, g % 2, q_mem, d_mem, kv_mem, ds_mem, pds, stats
                )
                for k in range(steps):
                    g = step0 + k
                    has_next = k + 1 < steps
                    buf = g % 2
                    # group B: dQ reads dS buf (all of it) and K
                    ds_mem[buf].open((key, "B", g))
                    kv_mem.open((key, "B", g))
                    nst, nph = (stage + 1) % stages, phase ^ (1 if stage + 1 == stages else 0)
                    if has_next:
                        yield wait_full(q_full, q_mem, nst, nph, g + 1)
                    q_mem[nst].open((key, "C", g + 1), has_next)
                    kv_mem.open((key, "C", g + 1))
                    # wait<1>: B retired
                    ds_mem[buf].close((key, "B", g))
                    kv_mem.close((key, "B", g))
                    # release Q(t), dO(t)
                    yield (
                        (lambda: True),
                        (lambda s=stage: (q_empty[s].arrive(), d_empty[s].arrive())),
                    )
                    stage, phase = nst, nph
                    # stage_dq_tile: bar.sync DqEmpty, write the smem tile, bar.arrive DqFull
                    yield from named_sync(dq_emptyb, 128, g)
                    dq_mem.write(("dq", g), stats, key)
                    dq_written.setdefault(g, set()).add(c)
                    yield (lambda: True), (lambda gg=g: dq_fullb.arrive(128, gg))
                    # D: dP^T of the next step
                    if has_next:
                        yield wait_full(d_full, d_mem, stage, phase, g + 1)
                    d_mem[stage].open((key, "D", g + 1), has_next)
                    kv_mem.open((key, "D", g + 1))
                    if has_next:
                        yield from scores_to_ds_sync(
                            key,
                            c,
                            g + 1,
                            stage,
                            (g + 1) % 2,
                            q_mem,
                            d_mem,
                            kv_mem,
                            ds_mem,
                            pds,
                            stats,
                        )
                    else:
                        q_mem[stage].close((key, "C", g + 1))
                        d_mem[stage].close((key, "D", g + 1))
                        kv_mem.close((key, "C", g + 1))
                        kv_mem.close((key, "D", g + 1))
            elif split:
                # v20: SplitSdP on the v1 schedule + DqInRing (v52: + ScoresAhead)
                own_full, own_mem, kind = (q_full, q_mem, "S") if c == 0 else (d_full, d_mem, "dP")
                if ahead and steps:
                    # prologue: the first step's scores, issued and retired before the loop
                    yield wait_full(own_full, own_mem, stage, phase, step0)
                    own_mem[stage].open((key, kind, step0))
                    own_mem[stage].close((key, kind, step0))
                for k in range(steps):
                    g = step0 + k
                    buf = g % n_pds
                    if c == 0:
                        # (ahead: the scores were computed in the previous step; the wait on
                        # this stage's full barrier stays, it passes at once)
                        yield wait_full(q_full, q_mem, stage, phase, g)
                        if not ahead:
                            q_mem[stage].open((key, "S", g))
                            kv_mem.open((key, "S", g))
                            q_mem[stage].close((key, "S", g))  # wait<0>
                            kv_mem.close((key, "S", g))
                        p_mem[buf].write(("P", g), stats, key)
                    elif ahead:
                        yield wait_full(d_full, d_mem, stage, phase, g)
                    else:
                        yield wait_full(d_full, d_mem, stage, phase, g)
                        d_mem[stage].open((key, "dP", g))
                        kv_mem.open((key, "dP", g))
                        d_mem[stage].close((key, "dP", g))  # wait<0>
                        kv_mem.close((key, "dP", g))
                    if mutate != "no_pready" or c == 0:
                        yield from named_sync(pready, 128, g)
                    if c == 0:
                        yield wait_full(d_full, d_mem, stage, phase, g)  # own wait before dV
                    # dV (group 1): reads the P^T buffer and this WG's dO half
                    d_mem[stage].open((key, "dV", g))
                    p_mem[buf].open((key, "dV", g))
                    kv_mem.open((key, "dV", g))
                    if c == 1:
                        # load_pds, dS^T, store_pds
                        if p_mem[buf].content != ("P", g):
                            raise Fail(f"{key}: P buf {buf} holds {p_mem[buf].content}, step {g}")
                        yield (lambda: True), None
                        if p_mem[buf].content != ("P", g):
                            raise Fail(f"{key}: P buf {buf} rewritten during its load, step {g}")
                        ds_mem[buf].write(("dS", g), stats, key)
                    if mutate == "no_pready" and c == 1:
                        # the arrival still happens (the barrier count stays right), only later
                        yield from named_sync(pready, 128, g)
                    yield from named_sync(pds, 128, g)
                    if c == 1:
                        yield wait_full(q_full, q_mem, stage, phase, g)  # own wait before dK
                    if ds_mem[buf].content != ("dS", g):
                        raise Fail(f"{key}: dS buf {buf} holds {ds_mem[buf].content}, step {g}")
                    q_mem[stage].open((key, "dK", g))
                    ds_mem[buf].open((key, "B", g))
                    kv_mem.open((key, "B", g))
                    yield (lambda: True), None  # the wgmmas run while the other roles move on
                    # wait<0>: dV, dK, dQ retired
                    for mem, r in (
                        (d_mem[stage], "dV"),
                        (p_mem[buf], "dV"),
                        (kv_mem, "dV"),
                        (q_mem[stage], "dK"),
                        (ds_mem[buf], "B"),
                        (kv_mem, "B"),
                    ):
                        mem.close((key, r, g))
                    if ahead:
                        # the next step's scores, from the other stage, during the staging;
                        # after the last step: no wait, discarded (not a needed read)
                        nst = (stage + 1) % stages
                        nph = phase ^ (1 if stage + 1 == stages else 0)
                        if mutate == "ahead_same_stage":
                            nst, nph = stage, phase
                        has_next = k + 1 < steps
                        if has_next:
                            yield wait_full(own_full, own_mem, nst, nph, g + 1)
                        own_mem[nst].open((key, "C", g + 1), has_next)
                        kv_mem.open((key, "C", g + 1))
                    for mem in (q_mem[stage], d_mem[stage]):
                        bad = [
                            r
                            for r, need in mem.reads.items()
                            if need and (r[0] == key or r[1] in ("S", "dP", "C"))
                        ]
                        if bad:
                            raise Fail(f"{key}: reads {bad} open on {mem.name} at dQ staging")
                    dq_written.setdefault(g, set()).add(c)
                    ring_stage_dq[stage].add((g, c))
                    yield (lambda gg=g: True), (lambda gg=g: ring_bars[gg & 1].arrive(128, gg))
                    if ahead:
                        yield (lambda: True), None  # the look-ahead runs past the arrival
                        nst = stage if mutate == "ahead_same_stage" else (stage + 1) % stages
                        own_mem[nst].close((key, "C", g + 1))  # wait<0>
                        kv_mem.close((key, "C", g + 1))
                    stage += 1
                    if stage == stages:
                        stage, phase = 0, phase ^ 1
            else:
                # v4: v1 schedule + DqInRing
                for k in range(steps):
                    g = step0 + k
                    buf = g % 2
                    yield wait_full(q_full, q_mem, stage, phase, g)
                    q_mem[stage].open((key, "S", g))
                    kv_mem.open((key, "S", g))
                    yield wait_full(d_full, d_mem, stage, phase, g)
                    d_mem[stage].open((key, "dP", g))
                    kv_mem.open((key, "dP", g))
                    # wait<1>, wait<0>: S, dP retired
                    q_mem[stage].close((key, "S", g))
                    d_mem[stage].close((key, "dP", g))
                    kv_mem.close((key, "S", g))
                    kv_mem.close((key, "dP", g))
                    ds_mem[buf].write(("dS", g, c), stats, key)
                    yield from named_sync(pds, 128, g)
                    # dV, dK (SS: read all of P^T/dS^T, this WG's half of dO/Q), dQ (dS, K)
                    q_mem[stage].open((key, "dK", g))
                    d_mem[stage].open((key, "dV", g))
                    ds_mem[buf].open((key, "B", g))
                    kv_mem.open((key, "B", g))
                    yield (lambda: True), None  # the wgmmas run while the other roles move on
                    # wait<0>
                    q_mem[stage].close((key, "dK", g))
                    d_mem[stage].close((key, "dV", g))
                    ds_mem[buf].close((key, "B", g))
                    kv_mem.close((key, "B", g))
                    # stage dQ into this WG's halves: the other WG may still read ITS halves only
                    # own reads retired (wait<0>); the other WG's S^T/dP^T (full-stage reads)
                    # retired
                    # before it reached the Pds barrier; its dK/dV read only its own halves.
                    for mem in (q_mem[stage], d_mem[stage]):
                        bad = [
                            r
                            for r, need in mem.reads.items()
                            if need and (r[0] == key or r[1] in ("S", "dP"))
                        ]
                        if bad:
                            raise Fail(f"{key}: reads {bad} open on {mem.name} at dQ staging")
                    dq_written.setdefault(g, set()).add(c)
                    ring_stage_dq[stage].add((g, c))
                    yield (lambda gg=g: True), (lambda gg=g: ring_bars[gg & 1].arrive(128, gg))
                    stage += 1
                    if stage == stages:
                        stage, phase = 0, phase ^ 1
            step0 += steps
            if persistent:
                yield (lambda: True), (lambda: kv_empty.arrive())
                if any(k2[0] == key for k2 in kv_mem.reads):
                    raise Fail(f"{key}: K/V reads open at kv_empty")

    ring_stage_dq = [set() for _ in range(stages)]

    def named_sync(bar, n, tag):
        gen = bar.gen
        yield (lambda: True), (lambda: bar.arrive(n, tag))
        yield (lambda: bar.gen > gen), None

    def scores_to_ds_sync(key, c, g, st, buf, q_mem, d_mem, kv_mem, ds_mem, pds, stats):
        q_mem[st].close((key, "C", g))
        kv_mem.close((key, "C", g))
        d_mem[st].close((key, "D", g))
        kv_mem.close((key, "D", g))
        q_mem[st].open((key, "A", g))
        d_mem[st].open((key, "A", g))
        ds_mem[buf].write(("dS", g, c), stats, key)
        yield from named_sync(pds, 128, g)
        q_mem[st].close((key, "A", g))
        d_mem[st].close((key, "A", g))

    def writer():
        if ring_in_dq:
            stage = 0
            steps_of = []
            if persistent:
                # bwd_dq_ring_writer_persistent: read each tile id, then its steps
                it = 0
                while True:
                    yield (lambda s=it % 2, p=(it >> 1) & 1: tile_full[s].ok(p)), None
                    tid = tile_ids[it % 2]
                    reads_of_slot[it].add("w")
                    tile_empty[it % 2].arrive()
                    it += 1
                    if tid < 0:
                        break
                    steps_of.extend(range(tile_base[tid], tile_base[tid] + tiles_steps[tid]))
                    # process this tile's steps before reading the next id
                    for g in range(tile_base[tid], tile_base[tid] + tiles_steps[tid]):
                        yield from ring_writer_step(g, stage)
                        stage = (stage + 1) % stages
                return
            for g in range(total_steps):
                yield from ring_writer_step(g, stage)
                stage = (stage + 1) % stages
            return
        yield from dq_tile_writer()

    def ring_writer_step(g, stage):
        if True:
            if True:
                yield from named_sync(ring_bars[g & 1], 32, g)
                if ring_stage_dq[stage] != {(g, 0), (g, 1)}:
                    raise Fail(
                        f"writer step {g}: ring stage {stage} holds dQ {ring_stage_dq[stage]}"
                    )
                if det and mutate == "free_before_turn":
                    yield (
                        (lambda s=stage: True),
                        (lambda s=stage: (q_empty[s].arrive(), d_empty[s].arrive())),
                    )
                if det:
                    # lane 0 spins (ld.acquire) until the predecessor released this query block
                    yield (lambda gg=g: sem_turn.get(gg, False)), None
                q_mem[stage].open(("w", g))
                d_mem[stage].open(("w", g))
                dq_added.append(g)
                if det:
                    gw_open.add(g)
                yield (lambda: True), None  # the bulk engine reads the stage
                # wait_group.read: the stage reads are done (the global writes maybe not)
                q_mem[stage].close(("w", g))
                d_mem[stage].close(("w", g))
                ring_stage_dq[stage] = set()
                if not (det and mutate == "free_before_turn"):
                    yield (
                        (lambda s=stage: True),
                        (lambda s=stage: (q_empty[s].arrive(), d_empty[s].arrive())),
                    )
                if det:
                    if mutate == "release_early":
                        # the release without wait_group 0: the global writes may be in flight
                        released.append((g, g in gw_open))
                        yield (lambda: True), None
                        gw_open.discard(g)
                    else:
                        yield (lambda: True), None  # the global writes land
                        gw_open.discard(g)  # wait_group 0; fences; st.release rank + 1
                        released.append((g, g in gw_open))

    def dq_tile_writer():
        it = 0
        if persistent:
            yield (lambda: tile_full[0].ok(0)), None
            tid = tile_ids[0]
            reads_of_slot[0].add("w")
            tile_empty[0].arrive()
            if tid < 0:
                return
        else:
            tid = 0
        yield (lambda: True), (lambda: dq_emptyb.arrive(32, 0))
        while True:
            steps = tiles_steps[tid]
            nxt = -1
            for k in range(steps):
                g = tile_base[tid] + k
                yield from named_sync(dq_fullb, 32, g)
                if dq_mem.content != ("dq", g) or dq_written.get(g) != {0, 1}:
                    raise Fail(
                        f"writer: step {g} dQ tile holds {dq_mem.content}, "
                        f"pieces {dq_written.get(g)}"
                    )
                dq_mem.open(("w", g))
                dq_added.append(g)
                more = True
                if k == steps - 1:
                    if persistent:
                        yield (
                            (lambda s=(it + 1) % 2, p=((it + 1) >> 1) & 1: tile_full[s].ok(p)),
                            None,
                        )
                        nxt = tile_ids[(it + 1) % 2]
                        reads_of_slot[it + 1].add("w")
                        tile_empty[(it + 1) % 2].arrive()
                        more = nxt >= 0
                    else:
                        more = False
                dq_mem.close(("w", g)) if more else None
                if more:
                    yield (lambda: True), (lambda gg=g: dq_emptyb.arrive(32, gg + 1))
            it += 1
            if nxt < 0:
                dq_mem.close(("w", tile_base[tid] + steps - 1))
                return
            tid = nxt

    def predecessor():
        # The previous key block in each query block's order: releases the steps in order, at
        # random times, and never waits on this CTA.
        for g in range(total_steps):
            yield (lambda: True), (lambda gg=g: sem_turn.__setitem__(gg, True))

    def successor():
        # The next key block: each release must find this CTA's adds of that step landed.
        for g in range(total_steps):
            yield (lambda gg=g: len(released) > gg), None
            step, still_open = released[g]
            if step != g or still_open:
                raise Fail(f"semaphore of step {step} released with its global adds in flight")

    roles = {"loader": loader(), "c0": consumer(0), "c1": consumer(1), "w": writer()}
    if det:
        roles["pred"] = predecessor()
        roles["succ"] = successor()
    tma_engine()
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
            cond, act = current[name]
            if cond():
                ready.append(name)
        tma_ready = bool(pending_tma)
        if not ready and not tma_ready:
            if active:
                raise Fail(f"deadlock: blocked roles {sorted(active)}")
            break
        if tma_ready and (not ready or rng.random() < 0.3):
            mem, content, bar = pending_tma.pop(rng.randrange(len(pending_tma)))
            mem.write(content, stats, "TMA")
            bar.complete_tx(1)
            continue
        # Random per-role speeds, redrawn now and then, so that one role can run far ahead of
        # another (uniform choice almost never starves a role long enough to expose a race).
        if rng.random() < 0.02:
            for k in speed:
                speed[k] = rng.expovariate(1.0) + 1e-3
        name = rng.choices(ready, weights=[speed[r] for r in ready])[0]
        cond, act = current[name]
        current[name] = None
        if act:
            act()
    if sorted(dq_added) != list(range(total_steps)) or len(dq_added) != total_steps:
        raise Fail(f"dQ added for steps {dq_added}, expected each of 0..{total_steps - 1} once")
    if det and [g for g, _ in released] != list(range(total_steps)):
        raise Fail(f"semaphore releases {released}, expected steps 0..{total_steps - 1} in order")
    if (
        dq_emptyb.arrived
        or dq_fullb.arrived
        or pds.arrived
        or pready.arrived
        or any(b.arrived for b in ring_bars)
    ):
        raise Fail("a named barrier generation is left open at exit")
    return stats


def mutation_check(rng):
    """Each mutation must make some trial fail (else the model would not notice that bug)."""
    ok = True
    for model, mutate in (
        ("v4det", "release_early"),
        ("v4det", "free_before_turn"),
        ("v20", "no_pready"),
        ("v20", "single_pds_buffer"),
        ("v52", "ahead_same_stage"),
    ):
        caught = None
        for _ in range(600):
            try:
                run_trial(model, rng, [rng.choice([3, 5, 9])], mutate=mutate)
            except Fail as e:
                caught = e
                break
        print(f"mutation {model}/{mutate}: {'caught: ' + str(caught) if caught else 'NOT CAUGHT'}")
        ok = ok and caught is not None
    return ok


def main():
    rng = random.Random(1)
    failures = 0
    if "--mutate" in sys.argv:
        return 0 if mutation_check(rng) else 1
    for model, tiles_choices in (
        ("v3", [[1], [2], [3], [7]]),
        ("v4", [[1], [2], [5], [9]]),
        ("v4det", [[1], [2], [5], [9]]),
        ("v20", [[1], [2], [5], [9]]),
        ("v20det", [[1], [2], [5], [9]]),
        ("v52", [[1], [2], [5], [9]]),
        ("v52det", [[1], [2], [5], [9]]),
        ("v11", [[1], [1, 1], [2, 1, 1, 3], [1, 1, 1, 1, 1], [4, 2, 6], [3, 1, 2, 1, 5, 1]]),
        ("v12", [[1], [1, 1], [2, 1, 1, 3], [1, 1, 1, 1, 1], [4, 2, 6], [3, 1, 2, 1, 5, 1]]),
    ):
        stats_total = {}
        trials = 0
        for tiles in tiles_choices:
            for _ in range(300):
                trials += 1
                try:
                    st = run_trial(model, rng, tiles)
                    for k, v in st.items():
                        stats_total[k] = stats_total.get(k, 0) + v
                except Fail as e:
                    failures += 1
                    print(f"FAIL {model} tiles {tiles}: {e}")
                    break
        print(f"{model}: {trials} random interleavings; {stats_total or 'no discarded-read races'}")
    print("protocol model:", "FAIL" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
