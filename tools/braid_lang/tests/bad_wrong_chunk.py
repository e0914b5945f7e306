"""A planted bug: the two-shot all-reduce of examples/ where rank 3 puts its
input chunk 0 where rank 2 expects chunk 2 (the put names the wrong chunk).
`check` must refuse it: the verifier finds rank 2's reduction missing rank
3's contribution to chunk 2."""
from braid_lang import *

n = 4
with CollectiveProgram("bad_wrong_chunk", AllReduce(n), n, algo="twoshot") as prog:
    inp = {r: Rank(r).get_input_buffer() for r in range(n)}
    out = {r: Rank(r).get_output_buffer() for r in range(n)}
    scr = {r: Buffer(r, n) for r in range(n)}
    ch = {(r, q): MemoryChannel(q, r) for r in range(n) for q in range(n) if q != r}
    peers = {r: [q for q in range(n) if q != r] for r in range(n)}
    for r in range(n):
        for q in peers[r]:
            src = inp[r][0] if (r, q) == (3, 2) else inp[r][q]
            ch[r, q].put(scr[q][r], src, tb=0)
            ch[r, q].signal(tb=0)
        for q in peers[r]:
            ch[r, q].wait(tb=0)
        Rank(r).reduce(inp[r][r], [scr[r][q] for q in peers[r]], tb=0, dst_chunk=out[r][r])
        for q in peers[r]:
            ch[r, q].put(out[q][r], out[r][r], tb=0)
            ch[r, q].signal(tb=0)
        for q in peers[r]:
            ch[r, q].wait(tb=0)
