"""Two-shot all-reduce: n ranks, n chunks per window; rank r owns chunk r.

Shot 1 (reduce-scatter): every rank puts its input chunk q into rank q's
scratch slot r and signals; rank q waits for all peers and reduces its own
input chunk q with the n - 1 slots into its output. Shot 2 (all-gather):
rank q puts its finished chunk into every peer's output and signals; each
rank waits for every peer. One channel per pair of ranks carries both
shots: its semaphore's first signal says "your slot is full", the second
"my chunk is in your output".
With -D blocks=2 the peers are shared among two thread blocks (peer q in
block q mod 2), joined by rank barriers around the reduction, which block
0 runs.
Parameters: -D ranks=N (2..8), -D proto=Simple|LL, -D instances=I (the
program replicated on I thread blocks, each on its share of the window), -D blocks=1|2.
"""
from braid_lang import *

n = param("ranks", 4)
proto = param("proto", "Simple")
instances = param("instances", 1)
blocks = param("blocks", 1)

with CollectiveProgram("twoshot_allreduce", AllReduce(n), n, instances=instances, protocol=proto,
                       min_message_size=0, max_message_size=1 << 22, algo="twoshot") as prog:
    inp = {r: Rank(r).get_input_buffer() for r in range(n)}
    out = {r: Rank(r).get_output_buffer() for r in range(n)}
    scr = {r: Buffer(r, n) for r in range(n)}  # slot q: rank q's contribution
    ch = {(r, q): MemoryChannel(q, r) for r in range(n) for q in range(n) if q != r}
    peers = {r: [q for q in range(n) if q != r] for r in range(n)}

    for r in range(n):
        rank = Rank(r)
        tb = {q: q % blocks for q in peers[r]}  # the block that serves peer q
        for q in peers[r]:
            ch[r, q].put(scr[q][r], inp[r][q], tb=tb[q])
            ch[r, q].signal(tb=tb[q])
        for q in peers[r]:
            ch[r, q].wait(tb=tb[q])
        if blocks > 1:
            rank.barrier(range(blocks))
        rank.reduce(inp[r][r], [scr[r][q] for q in peers[r]], tb=0, dst_chunk=out[r][r])
        if blocks > 1:
            rank.barrier(range(blocks))
        for q in peers[r]:
            ch[r, q].put(out[q][r], out[r][r], tb=tb[q])
            ch[r, q].signal(tb=tb[q])
        for q in peers[r]:
            ch[r, q].wait(tb=tb[q])
