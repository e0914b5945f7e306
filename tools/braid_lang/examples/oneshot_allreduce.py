"""One-shot all-reduce: every rank puts its whole input window into every
peer's scratch and signals; each rank waits for all peers and reduces its
own input with the n - 1 copies into its output, every chunk at once.
Parameters: -D ranks=N (2..8), -D proto=Simple|LL, -D instances=I (the
program replicated on I thread blocks, each on its share of the window).
"""
from braid_lang import *

n = param("ranks", 4)
proto = param("proto", "Simple")
instances = param("instances", 1)

with CollectiveProgram("oneshot_allreduce", AllReduce(n), n, instances=instances, protocol=proto,
                       max_message_size=1 << 18, algo="oneshot") as prog:
    inp = {r: Rank(r).get_input_buffer() for r in range(n)}
    out = {r: Rank(r).get_output_buffer() for r in range(n)}
    # scratch: n windows of n chunks; window q holds rank q's input
    scr = {r: Buffer(r, n * n) for r in range(n)}
    ch = {(r, q): MemoryChannel(q, r) for r in range(n) for q in range(n) if q != r}
    peers = {r: [q for q in range(n) if q != r] for r in range(n)}

    for r in range(n):
        for q in peers[r]:
            ch[r, q].put(scr[q][r * n:(r + 1) * n], inp[r][0:n], tb=0)
            if proto == "Simple":
                ch[r, q].signal(tb=0)
        if proto == "Simple":
            for q in peers[r]:
                ch[r, q].wait(tb=0)
        # LL: the reduction spins on each packet's flag; no semaphore needed
        Rank(r).reduce(inp[r][0:n], [scr[r][q * n:(q + 1) * n] for q in peers[r]],
                       tb=0, dst_chunk=out[r][0:n])
