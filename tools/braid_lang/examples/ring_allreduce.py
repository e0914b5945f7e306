"""Ring all-reduce: n ranks, n chunks per window; rank r owns chunk r.

Reduce-scatter: in step s rank r sends its partial sum of chunk
(r - s - 1) mod n into the next rank's scratch slot s. After n - 1 steps
rank r holds the full sum of chunk r and writes it to its own output and
the next rank's output in one op. All-gather: n - 2 more steps forward the
finished chunks, output to output.
Parameters: -D ranks=N (2..8), -D proto=Simple|LL, -D instances=I (the
program replicated on I thread blocks, each on its share of the window).
"""
from braid_lang import *

n = param("ranks", 4)
proto = param("proto", "Simple")
instances = param("instances", 1)

with CollectiveProgram("ring_allreduce", AllReduce(n), n, instances=instances, protocol=proto,
                       max_message_size=1 << 22, algo="ring") as prog:
    inp = {r: Rank(r).get_input_buffer() for r in range(n)}
    out = {r: Rank(r).get_output_buffer() for r in range(n)}
    scr = {r: Buffer(r, max(n - 1, 1)) for r in range(n)}
    send, recv = {}, {}
    for r in range(n):
        nxt, prv = (r + 1) % n, (r - 1) % n
        send[r] = MemoryChannel(nxt, r)  # r -> r+1: data and "slot full"
    for r in range(n):
        prv = (r - 1) % n
        # The channel r -> r-1 carries no data; its waits pair with the
        # signals of r-1's channel to r. With 2 ranks it is the same channel.
        recv[r] = send[r] if prv == (r + 1) % n else MemoryChannel(prv, r)

    for r in range(n):
        nxt = (r + 1) % n
        rank = Rank(r)
        # step 0: own input chunk r-1 to the next rank
        send[r].put(scr[nxt][0], inp[r][(r - 1) % n], tb=0)
        send[r].signal(tb=0)
        # steps 1 .. n-2: add own input to the partial sum received, pass it on
        for s in range(1, n - 1):
            c = (r - s - 1) % n
            recv[r].wait(tb=0)
            rank.reduce(inp[r][c], [scr[r][s - 1]], tb=0, dst_chunk=scr[nxt][s])
            send[r].signal(tb=0)
        # step n-1: chunk r is complete: own output and the next rank's output
        recv[r].wait(tb=0)
        rank.reduce(inp[r][r], [scr[r][n - 2]], tb=0, dst_chunk=[out[r][r], out[nxt][r]])
        send[r].signal(tb=0)
        # all-gather: forward the finished chunks
        for j in range(1, n - 1):
            recv[r].wait(tb=0)
            c = (r - j) % n
            send[r].put(out[nxt][c], out[r][c], tb=0)
            send[r].signal(tb=0)
        recv[r].wait(tb=0)
