"""All-gather: every rank copies its input to its own output segment. A
rank may write a peer's output only once that peer is in the launch, so
each rank first signals every peer "ready" and waits for their "ready";
then it puts its input into its segment of every peer's output and
signals, and waits for every peer's data. With -D proto=LL the input goes as packets into
the peers' scratch instead (no semaphores: the reader spins on the flags)
and each rank unpacks the n - 1 slots into its output.
Parameters: -D ranks=N (2..8), -D proto=Simple|LL, -D instances=I (the
program replicated on I thread blocks, each on its share of the window).
"""
from braid_lang import *

n = param("ranks", 4)
proto = param("proto", "Simple")
instances = param("instances", 1)

with CollectiveProgram("allgather", AllGather(n), n, instances=instances, protocol=proto,
                       max_message_size=1 << 22, algo="oneshot") as prog:
    inp = {r: Rank(r).get_input_buffer() for r in range(n)}
    out = {r: Rank(r).get_output_buffer() for r in range(n)}
    ch = {(r, q): MemoryChannel(q, r) for r in range(n) for q in range(n) if q != r}
    peers = {r: [q for q in range(n) if q != r] for r in range(n)}
    if proto == "LL":
        scr = {r: Buffer(r, n) for r in range(n)}  # slot q: rank q's packets

    for r in range(n):
        rank = Rank(r)
        rank.copy(out[r][r], inp[r][0], tb=0)
        if proto == "Simple":
            for q in peers[r]:
                ch[r, q].signal(tb=0)  # k 1: ready
            for q in peers[r]:
                ch[r, q].wait(tb=0)
        for q in peers[r]:
            if proto == "LL":
                ch[r, q].put_packets(scr[q][r], inp[r][0], tb=0)
            else:
                ch[r, q].put(out[q][r], inp[r][0], tb=0)
                ch[r, q].signal(tb=0)  # k 2: data
        for q in peers[r]:
            if proto == "LL":
                rank.unpack_packets(out[r][q], scr[r][q], tb=0)
            else:
                ch[r, q].wait(tb=0)
