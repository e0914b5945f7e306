"""Unit tests of the lowering: each call's IR op, channel and semaphore
numbering, LL ops, post-op, scratch-reuse credits and the refusals."""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from braid_lang import (AllGather, AllReduce, Buffer, CollectiveProgram, MemoryChannel,  # noqa: E402
                        PlanError, PortChannel, Rank, SwitchChannel, dumps)


def ops(doc, rank, block=0):
    return doc["ranks"][rank]["blocks"][block]["ops"]


class Lowering(unittest.TestCase):
    def test_put_signal_wait(self):
        with CollectiveProgram("p", AllReduce(3), 3) as prog:
            inp = Rank(0).get_input_buffer()
            out2 = Rank(2).get_output_buffer()
            ch = MemoryChannel(2, 0)
            ch.put(out2[1], inp[1], tb=0)
            ch.signal(tb=0)
            ch.signal(tb=0)
            MemoryChannel(0, 2).wait(tb=0)
        doc = prog.lower()
        self.assertEqual(doc["ranks"][0]["chans"], [{"peer": 2, "type": "memory"}])
        self.assertEqual(doc["ranks"][1]["chans"], [])
        o = ops(doc, 0)
        self.assertEqual(o[0], {"op": "put", "chunk": 1, "nchunks": 1, "nsrc": 1, "ndst": 1, "refs": [
            {"buf": "input", "index": 1}, {"buf": "output", "index": 1, "chan": 0, "peer": 2}]})
        self.assertEqual([(x["op"], x["k"]) for x in o[1:]], [("signal", 1), ("signal", 2)])
        self.assertEqual(o[1]["refs"], [{"buf": "sem", "chan": 0, "peer": 2, "index": 0}])
        self.assertEqual(ops(doc, 2), [{"op": "wait", "k": 1, "nsrc": 1, "refs": [
            {"buf": "sem", "chan": 0, "peer": 0, "index": 0}]}])
        self.assertEqual(doc["seq_per_iter"], 2)
        self.assertEqual(doc["nsems"], 1)
        self.assertEqual((doc["nchunks"], doc["nslots"], doc["inplace"]), (3, 0, "any"))

    def test_second_channel_object_is_second_semaphore(self):
        with CollectiveProgram("p", AllReduce(2), 2) as prog:
            a, b = MemoryChannel(1, 0), MemoryChannel(1, 0)
            a.signal(tb=0)
            b.signal(tb=1)
            b.signal(tb=1)
        doc = prog.lower()
        self.assertEqual(len(doc["ranks"][0]["chans"]), 1)
        self.assertEqual(doc["nblocks"], 2)
        self.assertEqual(doc["nsems"], 2)
        self.assertEqual(ops(doc, 0, 1)[1]["refs"][0]["index"], 1)
        self.assertEqual(ops(doc, 0, 1)[1]["k"], 2)
        self.assertEqual(ops(doc, 1, 1), [])

    def test_reduce_postop_and_credits(self):
        with CollectiveProgram("p", AllReduce(2), 2, max_message_size=4096, inplace=False) as prog:
            inp = {r: Rank(r).get_input_buffer() for r in range(2)}
            out = {r: Rank(r).get_output_buffer() for r in range(2)}
            scr = {r: Buffer(r, 2) for r in range(2)}
            ch = MemoryChannel(1, 0)
            ch.put(scr[1][1], inp[0][1], tb=0)
            ch.signal(tb=0)
            MemoryChannel(0, 1).wait(tb=0)
            Rank(1).reduce(inp[1][1], [scr[1][1]], tb=0, dst_chunk=out[1][1])
            Rank(1).reduce(inp[1][0], [inp[1][0]], tb=0, dst_chunk=scr[1][0])
        doc = prog.lower()
        self.assertEqual((doc["min_bytes"], doc["max_bytes"], doc["inplace"]), (0, 4096, "no"))
        self.assertEqual(doc["nslots"], 2)
        self.assertEqual(doc["nsems"], 2)  # semaphore 1: slot-reuse credits
        o0 = ops(doc, 0)
        self.assertEqual(o0[0], {"op": "wait", "nsrc": 1, "refs": [
            {"buf": "sem", "chan": 0, "peer": 1, "index": 1}]})  # k = 1 - seq_per_iter = 0, left out
        self.assertEqual(o0[1]["op"], "put")
        o1 = ops(doc, 1)
        self.assertEqual(o1[1]["flags"], ["postop"])
        self.assertEqual(o1[1]["chunk"], 1)
        self.assertNotIn("flags", o1[2])
        self.assertEqual(o1[-1], {"op": "signal", "k": 1, "ndst": 1, "refs": [
            {"buf": "sem", "chan": 0, "peer": 0, "index": 1}]})

    def test_ll_lowers_to_packet_ops(self):
        with CollectiveProgram("p", AllGather(2), 2, protocol="LL") as prog:
            inp = {r: Rank(r).get_input_buffer() for r in range(2)}
            out = {r: Rank(r).get_output_buffer() for r in range(2)}
            scr = {r: Buffer(r, 2) for r in range(2)}
            MemoryChannel(1, 0).put_packets(scr[1][0], inp[0][0], tb=0)
            MemoryChannel(0, 1)
            Rank(1).unpack_packets(out[1][0], scr[1][0], tb=0)
        doc = prog.lower()
        put = ops(doc, 0)[1]
        self.assertEqual((put["op"], put["k"]), ("pkt_put", 1))
        self.assertTrue(put["refs"][1]["ll"])
        unpack = ops(doc, 1)[0]
        self.assertEqual((unpack["op"], unpack["k_src"], unpack["nsrc"]), ("pkt_reduce", 1, 1))
        self.assertEqual(unpack["refs"][1], {"buf": "output", "index": 0})
        self.assertEqual(doc["ranks"][1]["chans"], [{"peer": 0, "type": "memory"}])

    def test_port_channel_flush_is_nop(self):
        with CollectiveProgram("p", AllReduce(2), 2) as prog:
            PortChannel(1, 0).flush(tb=0)
        doc = prog.lower()
        self.assertEqual(doc["ranks"][0]["chans"], [{"peer": 1, "type": "port"}])
        self.assertEqual(ops(doc, 0), [{"op": "nop"}])

    def test_switch_channel(self):
        with CollectiveProgram("p", AllReduce(2), 2) as prog:
            sw = SwitchChannel([0, 1])
            for r in range(2):
                inp, out, scr = Rank(r).get_input_buffer(), Rank(r).get_output_buffer(), Buffer(r, 2)
                MemoryChannel(1 - r, r)
                Rank(r).copy(scr[0:2], inp[0:2], tb=0)
                sw.at_rank(r).barrier(tb=0)
                sw.at_rank(r).reduce(scr[r], 1, out[r], tb=0, broadcast_offset=scr[r])
                sw.at_rank(r).broadcast(inp[r], 0, 1, tb=0, combine=True)
                sw.at_rank(r).barrier(tb=0)
        doc = prog.lower()
        self.assertEqual(doc["ranks"][1]["chans"], [{"peer": 0, "type": "memory"},
                                                    {"peer": -1, "type": "switch"}])
        o = ops(doc, 1)
        self.assertEqual(o[1], {"op": "mc_barrier", "k": 1, "ndst": 1, "refs": [
            {"buf": "sem", "chan": 1, "peer": -1, "index": 0}]})
        self.assertEqual(o[2], {"op": "mc_reduce", "flags": ["postop"], "chunk": 1, "nchunks": 1,
                                "nsrc": 1, "ndst": 2, "refs": [
                                    {"buf": "scratch", "chan": 1, "peer": -1, "index": 1},
                                    {"buf": "output", "index": 1},
                                    {"buf": "scratch", "chan": 1, "peer": -1, "index": 1}]})
        self.assertEqual((o[3]["op"], o[3]["chunk"], o[3]["refs"][1]["index"]), ("mc_red", 1, 0))
        self.assertEqual(o[4]["k"], 2)
        self.assertEqual((doc["nsems"], doc["seq_per_iter"]), (1, 2))

    def test_instances_replicate_blocks_chunks_slots_sems(self):
        with CollectiveProgram("p", AllGather(2, chunk_factor=2), 2, instances=2) as prog:
            scr = Buffer(1, 3)
            ch = MemoryChannel(1, 0)
            ch.put(Rank(1).get_output_buffer()[2:4], Rank(0).get_input_buffer()[0:2], tb=0)
            ch.signal(tb=0)
            MemoryChannel(0, 1)
            MemoryChannel(1, 0).put(scr[1], Rank(0).get_input_buffer()[1], tb=1)
        doc = prog.lower()
        self.assertEqual((doc["nblocks"], doc["nchunks"], doc["nslots"]), (4, 4, 6))
        self.assertEqual(doc["nsems"], 5)  # 2 objects x 2 instances, then the credit
        put = ops(doc, 0, 2)[0]  # instance 1 of block 0
        self.assertEqual((put["chunk"], put["nchunks"]), (2, 2))
        # input chunk 0 -> 1 * 2 + 0; output segment 1 chunk 0 -> 1 * 4 + 2 + 0
        self.assertEqual([r["index"] for r in put["refs"]], [2, 6])
        self.assertEqual(ops(doc, 0, 2)[1]["refs"][0]["index"], 2)  # semaphore 0 + 1 * 2
        put2 = ops(doc, 0, 3)[1]  # instance 1 of block 1, after its credit wait
        self.assertEqual((put2["chunk"], put2["refs"][1]["index"]), (3, 4))  # slot 1 + 1 * 3
        self.assertEqual(ops(doc, 0, 3)[0]["refs"][0]["index"], 4)  # the credit semaphore

    def test_dumps_is_json_of_the_document(self):
        with CollectiveProgram("p", AllReduce(2), 2) as prog:
            MemoryChannel(1, 0).signal(tb=0)
        doc = prog.lower()
        self.assertEqual(json.loads(dumps(doc)), doc)

    def test_refusals(self):
        with self.assertRaisesRegex(PlanError, "no channel to rank 1"):
            with CollectiveProgram("p", AllReduce(2), 2):
                Rank(0).reduce(Rank(0).get_input_buffer()[0], [Buffer(1, 1)[0]], tb=0)
        with self.assertRaisesRegex(PlanError, "peer's input"):
            with CollectiveProgram("p", AllReduce(2), 2):
                MemoryChannel(1, 0).get(Rank(0).get_output_buffer()[0], Rank(1).get_input_buffer()[0], tb=0)
        with self.assertRaisesRegex(PlanError, "same chunk of the window"):
            with CollectiveProgram("p", AllReduce(2), 2):
                Rank(0).copy(Rank(0).get_output_buffer()[1], Rank(0).get_input_buffer()[0], tb=0)
        with self.assertRaisesRegex(PlanError, "out of the buffer"):
            with CollectiveProgram("p", AllReduce(2), 2):
                Rank(0).get_input_buffer()[2]
        with self.assertRaisesRegex(PlanError, "every rank"):
            with CollectiveProgram("p", AllReduce(3), 3):
                SwitchChannel([0, 1])
        with self.assertRaisesRegex(PlanError, "Simple protocol only"):
            with CollectiveProgram("p", AllReduce(2), 2, protocol="LL"):
                SwitchChannel([0, 1])
        with self.assertRaisesRegex(PlanError, "names scratch only|moves scratch only"):
            with CollectiveProgram("p", AllReduce(2), 2):
                Rank(0).copy(Buffer(0, 1)[0], Buffer(0, 1)[0], tb=0)


if __name__ == "__main__":
    unittest.main()
