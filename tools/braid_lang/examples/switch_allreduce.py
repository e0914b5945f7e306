"""All-reduce over a switch channel (NVLS multicast): n ranks, n chunks.

Each rank copies its input window into its scratch; after a switch barrier
rank r reduces slot r of every rank's scratch through the switch and
stores the sum back into slot r of every rank's scratch; after a second
barrier each rank copies the n summed slots to its output. Runs where NVLS
is on (host mode: NCCL_NVLS_ENABLE=1). Parameter: -D ranks=N (2..8).
"""
from braid_lang import *

n = param("ranks", 4)

with CollectiveProgram("switch_allreduce", AllReduce(n), n, protocol="Simple",
                       max_message_size=1 << 22, algo="nvls", redops=["sum"],
                       dtypes=["float32", "int32"]) as prog:
    sw = SwitchChannel(list(range(n)), buffer_type="scratch")
    for r in range(n):
        rank = Rank(r)
        inp, out = rank.get_input_buffer(), rank.get_output_buffer()
        scr = Buffer(r, n)
        end = sw.at_rank(r)
        rank.copy(scr[0:n], inp[0:n], tb=0)
        end.barrier(tb=0)
        end.reduce(scr[r], 1, None, tb=0, broadcast_offset=scr[r])
        end.barrier(tb=0)
        rank.copy(out[0:n], scr[0:n], tb=0)
