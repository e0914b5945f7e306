#!/usr/bin/env python3
"""Writes the hand-designed MSCCL++ execution plans of this directory (the
JSON that MSCCL++'s DSL emits and its executor runs) for Braid's tests:

  ag_put.json          3-rank all-gather, out of place: each rank copies its
                       input into its block of the output and puts it into
                       every peer's output (2 chunks per rank).
  ag_get_inplace.json  3-rank all-gather, in place, 2 thread blocks: each
                       pulls one peer's block (get) from that peer's output
                       (3 chunks per rank).
  rs_scratch.json      3-rank reduce-scatter, out of place: each rank puts
                       peer p's block into p's scratch, then reduces its own
                       block with what the peers put (2 chunks per rank).
  rs_inplace.json      the same in place (MSCCL++'s DSL names the output as
                       the rank's block of the input).
  ar_pipeline.json     3-rank all-reduce, out of place, in a pipeline
                       (unit_size 65536, num_chunks 1; 2 iterations at its
                       max_message_size): reduce-scatter through scratch,
                       then a put of each reduced chunk to every peer.
  a2a_put.json         3-rank all-to-all: each rank puts block p of its
                       input into block r of peer p's output.
  ag_tbg_inplace.json  3-rank all-gather, in place, 2 thread blocks: for each
                       peer, thread block 0 handshakes (rlxsignal/rlxwait),
                       both put half of the rank's block into the peer's
                       output as a thread-block group (tbg_info) between
                       barriers of both, then thread block 0 signals and
                       waits; up to 4096 bytes per rank.
  ag_packet.json       3-rank all-gather, out of place, protocol LL: each
                       rank puts its input as packets into every peer's
                       scratch (ppkt), copies it into its own block, and
                       unpacks what the peers put into their blocks (upkt).
  ar_pipeline_sem.json 3-rank all-reduce, out of place, in MSCCL++'s own
                       pipeline shape: 3 thread blocks, each running a
                       pipeline (unit_size 131072, num_chunks 1; 2
                       iterations at its max_message_size of 786432 bytes;
                       from 393220) and handing each iteration
                       to the next with device semaphores: thread block 0
                       puts into the peers' scratch, signals and waits
                       (second memory channel per peer), sem_release 0;
                       thread block 1 sem_acquire 0, reduces its chunk into
                       the output and puts it into the peers' outputs,
                       sem_release 1; thread block 2 sem_acquire 1, signals
                       and waits (first channel), sem_release 2, which
                       thread block 0 acquires (init_value 2: credits, so
                       thread block 0 may run two releases ahead).
  ar_nvls_pipeline_sem.json
                       2-rank all-reduce, in place, shaped as MSCCL++'s own
                       test/execution-files/allreduce_pipeline.json (its
                       switch channel's buffer given as "buffer_type", which
                       MSCCL++'s executor reads): 3 thread blocks, each a
                       pipeline (unit_size 32768, num_chunks 1; 4 iterations
                       at its max_message_size of 262144 bytes; from
                       200000): thread block 0 copies the input into
                       scratch, signals and waits, sem_release 0; thread
                       block 1 sem_acquire 0, glres of its chunk through
                       the switch channel, sem_release 1; thread block 2
                       sem_acquire 1, signals and waits, copies scratch
                       into the buffer, sem_release 2, which thread block 0
                       acquires (init_value 32).
  ag_port_flush.json   3-rank all-gather, out of place, over port channels:
                       a handshake, a copy into the rank's own block, a put
                       into every peer's output, a flush, a signal and wait;
                       300000 to 400000 bytes per rank.

Run from this directory: python3 gen_plans.py
"""
import json

N = 3


def peers(r):
    return [p for p in range(N) if p != r]


def ref(t, index, size):
    return {"type": t, "index": index, "size": size}


def rbuf(bid, index, size):
    return {"buffer_id": bid, "index": index, "size": size}


def sync(name, ids, ct="memory"):
    return {"name": name, "channel_ids": ids, "channel_type": ct}


def data(name, src, dst, ids=None, ct="memory"):
    op = {"name": name, "src_buff": src, "dst_buff": dst}
    if ids is not None:
        op["channel_ids"] = ids
        op["channel_type"] = ct
    return op


def tb(i, ops, chans, rbufs, ct="memory"):
    t = {"id": i, "ops": ops,
         "channels": [{"channel_type": ct, "channel_ids": chans}]}
    if rbufs:
        t["remote_buffer_refs"] = [{"access_channel_type": ct,
                                    "remote_buffer_ids": rbufs}]
    return t


def gpu(r, inc, outc, scr, tbs, rbufs, ct="memory", conn=None, sems=()):
    return {"id": r, "input_chunks": inc, "output_chunks": outc,
            "scratch_chunks": scr, "threadblocks": tbs,
            "channels": [{"channel_type": ct, "connected_to": conn or peers(r)}],
            "remote_buffers": [{"rank": p, "type": t, "access_channel_types": [ct]}
                               for p, t in rbufs],
            "semaphores": [{"init_value": v} for v in sems]}


def plan(name, coll, inplace, gpus, lo=0, hi=2**64 - 1, proto="Simple"):
    return {"name": name, "collective": coll, "protocol": proto, "inplace": inplace,
            "reuse_resources": False, "gpus": gpus, "num_threads_per_block": 1024,
            "use_double_scratch_buffer": False, "buffer_alignment": 16,
            "min_message_size": lo, "max_message_size": hi}


ALL = list(range(N - 1))


def ag_put():
    c = 2
    gs = []
    for r in range(N):
        ops = [sync("signal", ALL), sync("wait", ALL),
               data("copy", [ref("i", 0, c)], [ref("o", r * c, c)]),
               data("put", [ref("i", 0, c)], [rbuf(k, r * c, c) for k in ALL], ALL),
               sync("signal", ALL), sync("wait", ALL)]
        gs.append(gpu(r, c, N * c, 0, [tb(0, ops, ALL, ALL)], [(p, "o") for p in peers(r)]))
    # 12288 bytes of output: 4096 bytes per rank and more.
    return plan("allgather_put", "allgather", False, gs, lo=12288)


def ag_get_inplace():
    c = 3
    gs = []
    for r in range(N):
        tbs = []
        for k, p in enumerate(peers(r)):
            ops = [sync("signal", [0]), sync("wait", [0]),
                   data("get", [rbuf(0, p * c, c)], [ref("o", p * c, c)], [0]),
                   sync("signal", [0]), sync("wait", [0])]
            tbs.append(tb(k, ops, [k], [k]))
        gs.append(gpu(r, c, N * c, 0, tbs, [(p, "o") for p in peers(r)]))
    return plan("allgather_get_inplace", "allgather", True, gs)


def rs(inplace):
    c = 2
    gs = []
    for r in range(N):
        ops = []
        for k, p in enumerate(peers(r)):
            slot = peers(p).index(r)
            ops.append(data("put", [ref("i", p * c, c)], [rbuf(k, slot * c, c)], [k]))
        ops += [sync("signal", ALL), sync("wait", ALL),
                data("re", [ref("i", r * c, c), ref("s", 0, c), ref("s", c, c)],
                     [ref("i", r * c, c) if inplace else ref("o", 0, c)])]
        gs.append(gpu(r, N * c, c, (N - 1) * c, [tb(0, ops, ALL, ALL)],
                      [(p, "s") for p in peers(r)]))
    return plan("reducescatter_scratch" + ("_inplace" if inplace else ""), "reducescatter",
                inplace, gs)


def ar_pipeline():
    gs = []
    for r in range(N):
        inner = []
        for k, p in enumerate(peers(r)):
            slot = peers(p).index(r)
            inner.append(data("put", [ref("i", p, 1)], [rbuf(k, slot, 1)], [k]))
        inner += [sync("signal", ALL), sync("wait", ALL),
                  data("re", [ref("i", r, 1), ref("s", 0, 1), ref("s", 1, 1)], [ref("o", r, 1)]),
                  data("put", [ref("o", r, 1)], [rbuf(N - 1 + k, r, 1) for k in ALL], ALL),
                  sync("signal", ALL), sync("wait", ALL)]
        ops = [{"name": "pipeline", "iter_context": {"unit_size": 65536, "num_chunks": 1},
                "ops": inner}]
        gs.append(gpu(r, N, N, N - 1, [tb(0, ops, ALL, list(range(2 * (N - 1))))],
                      [(p, "s") for p in peers(r)] + [(p, "o") for p in peers(r)]))
    # At 393216 bytes a chunk is 131072 bytes: 2 iterations of 65536.
    return plan("allreduce_pipeline", "allreduce", False, gs, hi=393216)


def a2a_put():
    gs = []
    for r in range(N):
        ops = [sync("signal", ALL), sync("wait", ALL),
               data("copy", [ref("i", r, 1)], [ref("o", r, 1)])]
        for k, p in enumerate(peers(r)):
            ops.append(data("put", [ref("i", p, 1)], [rbuf(k, r, 1)], [k]))
        ops += [sync("signal", ALL), sync("wait", ALL)]
        gs.append(gpu(r, N, N, 0, [tb(0, ops, ALL, ALL)], [(p, "o") for p in peers(r)]))
    return plan("alltoall_put", "alltoall", False, gs)


def ag_tbg_inplace():
    gs = []
    bar = {"name": "barrier", "barrier_id": 0, "num_threadblocks": 2}
    for r in range(N):
        tb0, tb1 = [], []
        for k, p in enumerate(peers(r)):
            put = data("put", [ref("o", r, 1)], [rbuf(k, r, 1)], [k])
            tb0 += [{"name": "rlxsignal", "channel_ids": [k], "channel_type": "memory"},
                    {"name": "rlxwait", "channel_ids": [k], "channel_type": "memory"},
                    bar, dict(put, tbg_info={"tb_id": 0, "tbg_size": 2}), bar,
                    sync("signal", [k]), sync("wait", [k])]
            tb1 += [bar, dict(put, tbg_info={"tb_id": 1, "tbg_size": 2}), bar]
        gs.append(gpu(r, 1, N, 0, [tb(0, tb0, ALL, ALL), tb(1, tb1, ALL, ALL)],
                      [(p, "o") for p in peers(r)]))
    return plan("allgather_tbg_inplace", "allgather", True, gs, hi=N * 4096)


def ag_packet():
    c = 2
    gs = []
    for r in range(N):
        ops = []
        for k, p in enumerate(peers(r)):
            slot = peers(p).index(r)
            ops.append(data("ppkt", [ref("i", 0, c)], [rbuf(k, slot * c, c)], [k]))
        ops.append(data("copy", [ref("i", 0, c)], [ref("o", r * c, c)]))
        for k, p in enumerate(peers(r)):
            ops.append(data("upkt", [ref("s", k * c, c)], [ref("o", p * c, c)]))
        gs.append(gpu(r, c, N * c, (N - 1) * c, [tb(0, ops, ALL, ALL)],
                      [(p, "s") for p in peers(r)]))
    return plan("allgather_packet", "allgather", False, gs, hi=3 * 65536, proto="LL")


def sem(name, ids):
    return {"name": name, "semaphore_ids": ids}


def ar_pipeline_sem():
    # Memory channels: connected_to peers twice; channels 0, 1 (the first
    # to each peer) for thread block 2, channels 2, 3 for thread block 0.
    first, second = ALL, [N - 1 + k for k in ALL]
    gs = []
    for r in range(N):
        t0 = [sem("sem_acquire", [2])]
        for k, p in enumerate(peers(r)):
            slot = peers(p).index(r)
            t0.append(data("put", [ref("i", p, 1)], [rbuf(k, slot, 1)], [k]))
        t0 += [sync("signal", ALL), sync("wait", ALL), sem("sem_release", [0])]
        t1 = [sem("sem_acquire", [0]),
              data("re", [ref("i", r, 1), ref("s", 0, 1), ref("s", 1, 1)], [ref("o", r, 1)]),
              data("put", [ref("o", r, 1)], [rbuf(N - 1 + k, r, 1) for k in ALL], ALL),
              sem("sem_release", [1])]
        t2 = [sem("sem_acquire", [1]), sync("signal", ALL), sync("wait", ALL),
              sem("sem_release", [2])]

        def piped(ops):
            return [{"name": "pipeline", "iter_context": {"unit_size": 131072, "num_chunks": 1},
                     "ops": ops}]
        rb = list(range(2 * (N - 1)))
        gs.append(gpu(r, N, N, N - 1,
                      [tb(0, piped(t0), second, rb[:N - 1]), tb(1, piped(t1), [], rb),
                       tb(2, piped(t2), first, [])],
                      [(p, "s") for p in peers(r)] + [(p, "o") for p in peers(r)],
                      conn=peers(r) + peers(r), sems=(0, 0, 2)))
        # Thread block 1 puts through the channels to the peers too.
        gs[-1]["threadblocks"][1]["channels"] = [{"channel_type": "memory",
                                                  "channel_ids": first}]
    # 393220 to 786432 bytes (above ar_pipeline.json's range); at the max a
    # chunk is 262144 bytes: 2 iterations of 131072.
    return plan("allreduce_pipeline_sem", "allreduce", False, gs, lo=393220, hi=786432)


def ar_nvls_pipeline_sem(n=2):
    def piped(ops):
        return [{"name": "pipeline", "iter_context": {"unit_size": 32768, "num_chunks": 1},
                 "ops": ops}]
    nop = {"name": "nop"}
    mine = list(range(n - 1))
    gs = []
    for r in range(n):
        others = [p for p in range(n) if p != r]
        t0 = ([sem("sem_acquire", [2]), nop] +
              [data("copy", [ref("i", k, 1)], [ref("s", k, 1)]) for k in range(n)] +
              [nop, sync("signal", mine), sync("wait", mine), nop, sem("sem_release", [0])])
        sw = {"switch_channel_id": 0, "index": r, "size": 1}
        t1 = [sem("sem_acquire", [0]), nop,
              {"name": "glres", "channel_ids": [0], "src_buff": [sw], "dst_buff": [dict(sw)],
               "channel_type": "switch"},
              nop, sem("sem_release", [1])]
        t2 = ([sem("sem_acquire", [1]), nop, sync("signal", mine), sync("wait", mine), nop] +
              [data("copy", [ref("s", k, 1)], [ref("i", k, 1)]) for k in range(n)] +
              [nop, sem("sem_release", [2])])
        tbs = [{"id": 0, "ops": piped(t0),
                "channels": [{"channel_type": "memory", "channel_ids": mine}]},
               {"id": 1, "ops": piped(t1),
                "channels": [{"buff": "s", "channel_type": "switch", "channel_ids": [0]}]},
               {"id": 2, "ops": piped(t2),
                "channels": [{"channel_type": "memory",
                              "channel_ids": [n - 1 + k for k in mine]}]}]
        gs.append({"id": r, "input_chunks": n, "output_chunks": 0, "scratch_chunks": n,
                   "channels": [{"buffer_type": "s", "channel_type": "switch",
                                 "rank_groups": [{"size": n, "ranks": list(range(n))}]},
                                {"channel_type": "memory", "connected_to": others + others}],
                   "remote_buffers": [], "threadblocks": tbs,
                   "semaphores": [{"init_value": v} for v in (0, 0, 32)]})
    d = plan("allreduce_nvls_pipeline", "allreduce", True, gs, lo=200000, hi=262144)
    d["reuse_resources"] = True
    return d


def ag_port_flush():
    c = 2
    gs = []
    for r in range(N):
        ops = [sync("signal", ALL, "port"), sync("wait", ALL, "port"),
               data("copy", [ref("i", 0, c)], [ref("o", r * c, c)]),
               data("put", [ref("i", 0, c)], [rbuf(k, r * c, c) for k in ALL], ALL, "port"),
               {"name": "flush", "channel_ids": ALL, "channel_type": "port"},
               sync("signal", ALL, "port"), sync("wait", ALL, "port")]
        gs.append(gpu(r, c, N * c, 0, [tb(0, ops, ALL, ALL, "port")],
                      [(p, "o") for p in peers(r)], ct="port"))
    # 300000 to 400000 bytes per rank (inside ag_put.json's range).
    return plan("allgather_port_flush", "allgather", False, gs, lo=3 * 300000, hi=3 * 400000)


for fname, doc in [("ar_pipeline_sem.json", ar_pipeline_sem()),
                   ("ar_nvls_pipeline_sem.json", ar_nvls_pipeline_sem()),
                   ("ag_port_flush.json", ag_port_flush()),
("ag_put.json", ag_put()), ("ag_get_inplace.json", ag_get_inplace()),
                   ("rs_scratch.json", rs(False)), ("rs_inplace.json", rs(True)),
                   ("ar_pipeline.json", ar_pipeline()), ("a2a_put.json", a2a_put()),
                   ("ag_packet.json", ag_packet()), ("ag_tbg_inplace.json", ag_tbg_inplace())]:
    with open(fname, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
