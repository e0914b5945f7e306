"""A planted bug: the two-shot all-reduce of examples/ with rank 1's signal
to rank 2 in the first shot left out. `check` must refuse it, the verifier
naming the rank, block and op that waits for ever (or reads too early)."""
from braid_lang import *

n = 4
with CollectiveProgram("bad_missing_signal", AllReduce(n), n, algo="twoshot") as prog:
    inp = {r: Rank(r).get_input_buffer() for r in range(n)}
    out = {r: Rank(r).get_output_buffer() for r in range(n)}
    scr = {r: Buffer(r, n) for r in range(n)}
    ch = {(r, q): MemoryChannel(q, r) for r in range(n) for q in range(n) if q != r}
    peers = {r: [q for q in range(n) if q != r] for r in range(n)}
    for r in range(n):
        for q in peers[r]:
            ch[r, q].put(scr[q][r], inp[r][q], tb=0)
            if (r, q) != (1, 2):
                ch[r, q].signal(tb=0)
        for q in peers[r]:
            ch[r, q].wait(tb=0)
        Rank(r).reduce(inp[r][r], [scr[r][q] for q in peers[r]], tb=0, dst_chunk=out[r][r])
        for q in peers[r]:
            ch[r, q].put(out[q][r], out[r][r], tb=0)
            ch[r, q].signal(tb=0)
        for q in peers[r]:
            ch[r, q].wait(tb=0)
