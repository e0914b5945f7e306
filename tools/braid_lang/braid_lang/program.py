"""Programs, ranks, buffers, chunks and channels, and their lowering to
Braid's plan IR (src/device/ir.h) as a plan JSON document (docs/plans.md).

A program describes one iteration of a plan: the window of the user buffers
is cut into `nchunks` chunks and every call names chunks, scratch slots and
channels. Each call is lowered at once to one or more IR ops appended to the
(rank, thread block) it names; semaphore targets (`k`) are numbered per
channel object, scratch-reuse credits and the library fields are added when
the program is written out.
"""

import json

# ---- collectives --------------------------------------------------------------


class Collective:
    """What the buffers hold. `chunk_factor` multiplies the chunks per window."""

    name = None
    out_segs_all = False
    reduction = False

    def __init__(self, num_ranks, chunk_factor=1, inplace=None):
        if num_ranks < 1 or chunk_factor < 1:
            raise ValueError("num_ranks and chunk_factor must be at least 1")
        self.num_ranks = num_ranks
        self.chunk_factor = chunk_factor
        self.inplace = inplace

    def nchunks(self):
        """Chunks of one segment of the window."""
        raise NotImplementedError

    def input_size(self):
        return self.nchunks()

    def output_size(self):
        return self.nchunks() * (self.num_ranks if self.out_segs_all else 1)


class AllReduce(Collective):
    """Input and output hold num_ranks * chunk_factor chunks each."""

    name = "allreduce"
    reduction = True

    def nchunks(self):
        return self.num_ranks * self.chunk_factor


class AllGather(Collective):
    """Input holds chunk_factor chunks; output num_ranks segments of them:
    output chunk q * chunk_factor + c is chunk c of rank q's input."""

    name = "allgather"
    out_segs_all = True

    def nchunks(self):
        return self.chunk_factor


_COLLECTIVES = {"allreduce": AllReduce, "allgather": AllGather}

# ---- the program being built ----------------------------------------------------

_current = None
_programs = []


def current_program():
    """The program of the innermost open `with CollectiveProgram(...)`."""
    if _current is None:
        raise RuntimeError("no CollectiveProgram is open: use `with CollectiveProgram(...) as prog:`")
    return _current


def programs():
    """Every program closed so far, in order (what `check` writes)."""
    return list(_programs)


class PlanError(Exception):
    """A call that cannot be lowered: names the rank, block and call."""


class CollectiveProgram:
    """A plan under construction; use as a context manager.

    collective: an AllReduce/AllGather object or "allreduce"/"allgather".
    protocol: "Simple" or "LL" (in LL every scratch slot holds packets).
    min_message_size, max_message_size: per-rank bytes (library fields
    min_bytes, max_bytes; max 0 or None: no limit).
    inplace: True (only in-place calls), False (only out of place), None
    (either; the plan must hold both ways).
    dtypes, redops: optional library constraints (docs/plans.md names).
    """

    def __init__(self, name, collective, num_ranks, instances=1, protocol="Simple",
                 min_message_size=0, max_message_size=None, inplace=None,
                 dtypes=None, redops=None, algo="copy", reuse_credits=True):
        if isinstance(collective, str):
            if collective not in _COLLECTIVES:
                raise ValueError("collective %r: one of %s" % (collective, ", ".join(_COLLECTIVES)))
            collective = _COLLECTIVES[collective](num_ranks)
        if collective.num_ranks != num_ranks:
            raise ValueError("collective is for %d ranks, program for %d"
                             % (collective.num_ranks, num_ranks))
        if protocol not in ("Simple", "LL"):
            raise ValueError("protocol %r: Simple or LL" % protocol)
        if not isinstance(instances, int) or instances < 1:
            raise ValueError("instances must be an int >= 1")
        if inplace is None:
            inplace = collective.inplace
        self.name = name
        self.collective = collective
        self.num_ranks = num_ranks
        self.instances = instances
        self.protocol = protocol
        self.min_message_size = int(min_message_size or 0)
        self.max_message_size = int(max_message_size or 0)
        self.inplace = inplace
        self.dtypes = dtypes
        self.redops = redops
        self.algo = algo
        self.reuse_credits = reuse_credits
        self.nchunks = collective.nchunks()
        # rank -> list of peers (IR channel table), (rank, peer) -> type
        self.chans = [[] for _ in range(num_ranks)]
        self.chan_type = {}
        # (src, dst) -> channel objects created on src towards dst
        self.chan_objs = {}
        # rank -> {tb: [op dict]}
        self.blocks = [dict() for _ in range(num_ranks)]
        self.nslots = 0
        self.scratch_next = [0] * num_ranks
        self.slot_chunk = {}  # (rank, slot) -> chunk it holds
        self.sig_count = {}  # (rank, chan, sem) -> signals per iteration
        self.wait_count = {}
        self.remote_scratch = set()  # (writer rank, tb, chan) that writes peer scratch
        self.switch = None
        self.switch_sems = 0
        self.sync_max = 0

    def __enter__(self):
        global _current
        self.prev = _current
        _current = self
        return self

    def __exit__(self, exc_type, exc, tb):
        global _current
        _current = self.prev
        if exc_type is None:
            _programs.append(self)
        return False

    # -- channel table -------------------------------------------------------
    def chan_index(self, rank, peer, ctype=None):
        """IR channel index of `peer` in `rank`'s table, made on first use."""
        if peer == rank:
            raise PlanError("rank %d: a channel needs another rank" % rank)
        table = self.chans[rank]
        if peer not in table:
            table.append(peer)
            self.chan_type[(rank, peer)] = ctype or "memory"
        elif ctype == "port":
            self.chan_type[(rank, peer)] = "port"
        return table.index(peer)

    def chan_to(self, rank, peer, what):
        if peer not in self.chans[rank]:
            raise PlanError("rank %d: %s names rank %d's buffer, but rank %d has no channel to "
                            "rank %d: create a MemoryChannel(%d, %d) first"
                            % (rank, what, peer, rank, peer, peer, rank))
        return self.chans[rank].index(peer)

    # -- ops -----------------------------------------------------------------
    def emit(self, rank, tb, op):
        if not isinstance(tb, int) or tb < 0:
            raise PlanError("rank %d: thread block %r must be an int >= 0" % (rank, tb))
        self.blocks[rank].setdefault(tb, []).append(op)
        return op

    def ref(self, rank, chunk, t=0, ll=None):
        """The IR reference of `chunk` seen from `rank`."""
        r = {"buf": chunk.kind}
        if chunk.kind == "scratch" and (ll if ll is not None else self.protocol == "LL"):
            r["ll"] = True
        if chunk.rank != rank:
            if chunk.kind == "input":
                raise PlanError("rank %d: a peer's input (rank %d) cannot be named: library plans "
                                "may not read peers' inputs; have rank %d copy it to its output or "
                                "scratch first" % (rank, chunk.rank, chunk.rank))
            r["chan"] = self.chan_to(rank, chunk.rank, "a %s chunk" % chunk.kind)
            r["peer"] = chunk.rank
        r["index"] = chunk.index + t  # the exporter's key order
        return r

    def data_op(self, rank, tb, code, srcs, dsts, postop=None, what=""):
        """Lower a data op moving equal-sized chunks from srcs to dsts."""
        size = srcs[0].size
        for c in list(srcs) + list(dsts):
            if c.size != size:
                raise PlanError("rank %d tb %d %s: chunks of different sizes (%d and %d)"
                                % (rank, tb, what, size, c.size))
        chunk = None
        for c in list(srcs) + list(dsts):
            if c.kind in ("input", "output"):
                this = c.index % self.nchunks
                if chunk is not None and this != chunk:
                    raise PlanError("rank %d tb %d %s: input/output chunks of one op must be the "
                                    "same chunk of the window (chunk %d and %d)"
                                    % (rank, tb, what, chunk, this))
                chunk = this
        if chunk is None:
            held = [self.slot_chunk.get((c.rank, c.index)) for c in srcs if c.kind == "scratch"]
            held = [h for h in held if h is not None]
            if not held:
                raise PlanError("rank %d tb %d %s: moves scratch only and no earlier op put a chunk "
                                "in its source slot: name the chunk it holds" % (rank, tb, what))
            chunk = held[0]
        if chunk + size > self.nchunks:
            raise PlanError("rank %d tb %d %s: chunks %d..%d pass the window's %d chunks"
                            % (rank, tb, what, chunk, chunk + size - 1, self.nchunks))
        ll_src = any(c.kind == "scratch" and self.protocol == "LL" for c in srcs)
        ll_dst = any(c.kind == "scratch" and self.protocol == "LL" for c in dsts)
        if ll_src or ll_dst:
            if code == "get" or any(c.rank != rank for c in srcs if c.kind == "scratch"):
                raise PlanError("rank %d tb %d %s: LL packets are read from local scratch only"
                                % (rank, tb, what))
            if code in ("copy", "put") and not ll_src:
                code = "pkt_put"
            else:
                code = "pkt_reduce"
        op = {"op": code, "chunk": chunk, "nchunks": size, "nsrc": len(srcs), "ndst": len(dsts),
              "refs": [self.ref(rank, c) for c in srcs] + [self.ref(rank, c) for c in dsts]}
        if code in ("pkt_put", "pkt_reduce"):
            if ll_dst:
                op["k"] = 1
            if ll_src:
                op["k_src"] = 1
        if postop is None:
            postop = code in ("reduce", "pkt_reduce") and self.collective.reduction and \
                any(c.kind == "output" for c in dsts) and len(srcs) > 1
        if postop:
            op["flags"] = ["postop"]
        for c in dsts:
            if c.kind == "scratch":
                for t in range(size):
                    self.slot_chunk[(c.rank, c.index + t)] = chunk + t
                if c.rank != rank:
                    self.remote_scratch.add((rank, tb, self.chans[rank].index(c.rank)))
        return self.emit(rank, tb, op)

    def sync_op(self, rank, tb, code, chan, sem):
        counts = self.sig_count if code == "signal" else self.wait_count
        key = (rank, chan, sem)
        counts[key] = counts.get(key, 0) + 1
        ref = {"buf": "sem", "chan": chan, "peer": self.chans[rank][chan], "index": sem}
        op = {"op": code, "k": counts[key], "nsrc": 1 if code == "wait" else 0,
              "ndst": 1 if code == "signal" else 0, "refs": [ref]}
        return self.emit(rank, tb, op)

    def alloc_scratch(self, rank, size):
        base = self.scratch_next[rank]
        self.scratch_next[rank] += size
        self.nslots = max(self.nslots, self.scratch_next[rank])
        return base

    # -- output --------------------------------------------------------------
    def lower(self):
        """The plan as a JSON-ready dict (call after the `with` block).

        Scratch-reuse credits (reuse_credits): where rank w writes into
        rank r's scratch, w's block waits, before its first such write,
        for r's credit of the previous iteration (k = 1 - seq_per_iter on
        semaphore `nsems - 1`), and r, after all its blocks (a barrier if
        it has several), signals the credit (k = 1) to every such w. So a
        window's writes never overtake a peer still reading the previous
        window's slots; the verifier checks the rest."""
        nblocks = max([max(b) + 1 for b in self.blocks if b] + [1])
        nsems = 0
        for (s, d), objs in self.chan_objs.items():
            nsems = max(nsems, len(objs))
        nsems = max(nsems, self.switch_sems)
        inst = self.instances
        expanded = [self._instances(r, nblocks, nsems) for r in range(self.num_ranks)]
        nblocks *= inst
        nsems *= inst
        spi = max(1, self.sync_max)
        for counts in (self.sig_count, self.wait_count):
            for v in counts.values():
                spi = max(spi, v)
        ranks = []
        credit_sem = nsems
        writers = {}  # reader rank -> set of writer ranks (through scratch)
        if self.reuse_credits:
            for (w, tb, c) in self.remote_scratch:
                writers.setdefault(self.chans[w][c], set()).add(w)
        if writers:
            nsems += 1  # the credit semaphore, after every channel object's
        for r in range(self.num_ranks):
            blocks = []
            for b in range(nblocks):
                ops = expanded[r].get(b, [])
                if writers:
                    # before this block's first write into a peer's scratch:
                    # the previous iteration's credit from that peer
                    out, credited = [], set()
                    for o in ops:
                        for ref in o.get("refs", [])[o.get("nsrc", 0):]:
                            if (ref["buf"] == "scratch" and ref.get("chan", SWITCH) != SWITCH
                                    and ref["chan"] not in credited):
                                credited.add(ref["chan"])
                                sem = {"buf": "sem", "chan": ref["chan"], "peer": ref["peer"],
                                       "index": credit_sem}
                                out.append({"op": "wait", "k": 1 - spi, "nsrc": 1, "refs": [sem]})
                        out.append(o)
                    ops = out
                    mine = sorted(writers.get(r, ()))
                    if mine:
                        if nblocks > 1:
                            ops.append({"op": "barrier"})
                        if b == 0:
                            for w in mine:
                                c = self.chan_index(r, w)  # made here if r never named w
                                ops.append({"op": "signal", "k": 1, "ndst": 1, "refs": [
                                    {"buf": "sem", "chan": c, "peer": w, "index": credit_sem}]})
                blocks.append({"ops": ops})
            chans = [{"peer": p, "type": self.chan_type[(r, p)]} for p in self.chans[r]]
            if self.switch is not None:
                for blk in blocks:
                    blk["ops"] = [_switch_resolved(o, len(chans)) for o in blk["ops"]]
                chans.append({"peer": -1, "type": "switch"})
            for blk in blocks:
                blk["ops"] = [_clean(o) for o in blk["ops"]]
            ranks.append({"rank": r, "chans": chans, "blocks": blocks})
        doc = {
            "format": "braid-plan", "version": 1,
            "collective": self.collective.name, "algo": self.algo, "proto": self.protocol,
            "flags": [], "root": 0, "nranks": self.num_ranks, "nblocks": nblocks,
            "nchunks": self.nchunks * inst, "nslots": self.nslots * inst,
            "slot_div": self.nslots * inst if self.nslots else 1,
            "nsems": max(nsems, 1), "seq_per_iter": spi,
            "min_bytes": self.min_message_size,
        }
        if self.max_message_size:
            doc["max_bytes"] = self.max_message_size
        doc["inplace"] = {None: "any", True: "yes", False: "no"}[self.inplace]
        if self.dtypes:
            doc["dtypes"] = list(self.dtypes)
        if self.redops:
            doc["redops"] = list(self.redops)
        doc["ranks"] = ranks
        return doc

    def _instances(self, rank, nblocks, nsems):
        """Rank `rank`'s blocks with the program replicated `instances`
        times: instance i runs thread block t as block i * nblocks + t, on
        chunks i * nchunks + c of a window of instances * nchunks chunks
        (in every segment), scratch slots i * nslots + s, and semaphores
        i * nsems + m of each channel (switch semaphores likewise)."""
        n, inst, out = self.nchunks, self.instances, {}
        for i in range(inst):
            for tb, ops in self.blocks[rank].items():
                new_ops = []
                for o in ops:
                    o = dict(o)
                    if "refs" in o:
                        refs = []
                        for ref in o["refs"]:
                            ref = dict(ref)
                            if ref["buf"] in ("input", "output"):
                                seg, c = divmod(ref["index"], n)
                                ref["index"] = seg * n * inst + i * n + c
                            elif ref["buf"] == "scratch":
                                ref["index"] += i * self.nslots
                            else:
                                ref["index"] += i * nsems
                            refs.append(ref)
                        o["refs"] = refs
                    if o["op"] not in ("signal", "wait", "barrier", "nop", "mc_barrier"):
                        o["chunk"] = o.get("chunk", 0) + i * n
                    new_ops.append(o)
                out[i * nblocks + tb] = new_ops
        return out

    def json(self):
        """The plan document as text, one op per line."""
        return dumps(self.lower())


def _switch_resolved(op, index):
    """The op with its switch placeholder refs on channel `index`."""
    if not any(ref.get("chan") == SWITCH for ref in op.get("refs", [])):
        return op
    op = dict(op)
    op["refs"] = [dict(ref, chan=index) if ref.get("chan") == SWITCH else ref for ref in op["refs"]]
    return op


def _clean(op):
    """Leave out zero numeric fields, as the exporter does; order the keys."""
    out = {"op": op["op"]}
    if op.get("flags"):
        out["flags"] = op["flags"]
    for key in ("chunk", "nchunks", "k", "k_src", "nsrc", "ndst"):
        if op.get(key):
            out[key] = op[key]
    if op.get("refs"):
        out["refs"] = op["refs"]
    return out


def dumps(doc):
    """JSON text with one op per line (readable and diffable)."""
    head = {k: v for k, v in doc.items() if k != "ranks"}
    lines = ["{"]
    for k, v in head.items():
        lines.append("  %s: %s," % (json.dumps(k), json.dumps(v)))
    lines.append('  "ranks": [')
    for i, r in enumerate(doc["ranks"]):
        lines.append('    {"rank": %d, "chans": %s, "blocks": [' % (r["rank"], json.dumps(r["chans"])))
        for j, b in enumerate(r["blocks"]):
            lines.append('      {"ops": [')
            ops = [json.dumps(o) for o in b["ops"]]
            lines.append(",\n".join("        " + o for o in ops))
            lines.append("      ]}" + ("," if j + 1 < len(r["blocks"]) else ""))
        lines.append("    ]}" + ("," if i + 1 < len(doc["ranks"]) else ""))
    lines.append("  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


# ---- ranks, buffers, chunks ----------------------------------------------------


class Chunk:
    """`size` consecutive chunks of a rank's buffer, from `index`."""

    def __init__(self, rank, kind, index, size):
        self.rank, self.kind, self.index, self.size = rank, kind, index, size

    def __repr__(self):
        return "Chunk(rank %d, %s[%d:%d])" % (self.rank, self.kind, self.index, self.index + self.size)


class Buffer:
    """A rank's buffer of `size` chunks. Buffer(rank, size) is scratch."""

    def __init__(self, rank, size, kind="scratch", base=None):
        prog = current_program()
        if not 0 <= rank < prog.num_ranks:
            raise PlanError("rank %d is outside the program's %d ranks" % (rank, prog.num_ranks))
        self.rank, self.size, self.kind = rank, size, kind
        if kind == "scratch" and base is None:
            base = prog.alloc_scratch(rank, size)
        self.base = base or 0

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(self.size)
            if step != 1 or stop <= start:
                raise PlanError("rank %d %s[%s]: a chunk is a non-empty run of consecutive chunks"
                                % (self.rank, self.kind, key))
        else:
            start, stop = key, key + 1
            if not 0 <= start < self.size:
                raise PlanError("rank %d %s[%d]: out of the buffer's %d chunks"
                                % (self.rank, self.kind, key, self.size))
        return Chunk(self.rank, self.kind, self.base + start, stop - start)

    def __len__(self):
        return self.size


class Rank:
    """Rank `rank` of the current program: its buffers and local ops."""

    def __init__(self, rank):
        self.prog = current_program()
        if not 0 <= rank < self.prog.num_ranks:
            raise PlanError("rank %d is outside the program's %d ranks" % (rank, self.prog.num_ranks))
        self.rank = rank

    def get_input_buffer(self):
        return Buffer(self.rank, self.prog.collective.input_size(), "input")

    def get_output_buffer(self):
        return Buffer(self.rank, self.prog.collective.output_size(), "output")

    def _own(self, chunk, what):
        if chunk.rank != self.rank:
            raise PlanError("rank %d %s: chunk %r is rank %d's, not local"
                            % (self.rank, what, chunk, chunk.rank))

    def copy(self, dst_chunk, src_chunk, tb):
        """COPY one local chunk to one or more local destinations (LL: PKT_PUT
        into packet scratch, PKT_REDUCE out of it)."""
        dsts = dst_chunk if isinstance(dst_chunk, (list, tuple)) else [dst_chunk]
        self._own(src_chunk, "copy")
        for d in dsts:
            self._own(d, "copy")
        return self.prog.data_op(self.rank, tb, "copy", [src_chunk], dsts, what="copy")

    def reduce(self, src_chunk, other_chunks, tb, dst_chunk=None, postop=None):
        """REDUCE src_chunk with other_chunks (local or peers', through a
        channel) into dst_chunk (default src_chunk; a list of local and/or
        peers' chunks). The post-op is applied when an output is written."""
        srcs = [src_chunk] + list(other_chunks)
        dsts = dst_chunk if isinstance(dst_chunk, (list, tuple)) else [dst_chunk or src_chunk]
        self._own(src_chunk, "reduce")
        return self.prog.data_op(self.rank, tb, "reduce", srcs, dsts, postop=postop, what="reduce")

    def unpack_packets(self, dst_chunk, src_chunk, tb):
        """LL: packets of local scratch to a plain chunk (PKT_REDUCE, 1 source)."""
        return self.copy(dst_chunk, src_chunk, tb)

    copy_packets = copy
    reduce_packets = reduce

    def barrier(self, tb_list):
        """BARRIER in every listed block; the IR's barrier joins every block
        of the rank, so the list must name all of them."""
        for tb in tb_list:
            self.prog.emit(self.rank, tb, {"op": "barrier"})

    def nop(self, tb):
        self.prog.emit(self.rank, tb, {"op": "nop"})


# ---- channels -------------------------------------------------------------------


class _Channel:
    ctype = "memory"

    def __init__(self, dst_rank, src_rank):
        prog = current_program()
        for r in (dst_rank, src_rank):
            if not 0 <= r < prog.num_ranks:
                raise PlanError("channel rank %d is outside the program's %d ranks"
                                % (r, prog.num_ranks))
        self.prog, self.dst, self.src = prog, dst_rank, src_rank
        self.chan = prog.chan_index(src_rank, dst_rank, self.ctype)
        objs = prog.chan_objs.setdefault((src_rank, dst_rank), [])
        self.sem = len(objs)  # the m-th channel src -> dst: semaphore m
        objs.append(self)

    def _check(self, chunk, rank, what):
        if chunk.rank != rank:
            raise PlanError("rank %d %s on the channel to rank %d: chunk %r should be rank %d's"
                            % (self.src, what, self.dst, chunk, rank))

    def put(self, dst_chunk, src_chunk, tb):
        """PUT a local chunk into the peer's output or scratch (LL scratch:
        PKT_PUT with flag 1)."""
        self._check(dst_chunk, self.dst, "put")
        self._check(src_chunk, self.src, "put")
        return self.prog.data_op(self.src, tb, "put", [src_chunk], [dst_chunk], what="put")

    put_packets = put

    def signal(self, tb, relaxed=False, data_sync=None):
        """SIGNAL semaphore m of the channel (m: this object's place among
        the channels from this rank to the peer); the n-th signal of an
        iteration stores k = n. Every signal releases."""
        return self.prog.sync_op(self.src, tb, "signal", self.chan, self.sem)

    def wait(self, tb, relaxed=False, data_sync=None):
        """WAIT for the peer's n-th signal of this iteration on the paired
        channel (the m-th from the peer to this rank)."""
        return self.prog.sync_op(self.src, tb, "wait", self.chan, self.sem)

    def put_with_signal(self, dst_chunk, src_chunk, tb):
        self.put(dst_chunk, src_chunk, tb)
        return self.signal(tb)


class MemoryChannel(_Channel):
    """A channel from src_rank to dst_rank over load/store."""

    ctype = "memory"

    def get(self, dst_chunk, src_chunk, tb):
        """GET a chunk of the peer's output or scratch into a local chunk."""
        self._check(dst_chunk, self.src, "get")
        self._check(src_chunk, self.dst, "get")
        return self.prog.data_op(self.src, tb, "get", [src_chunk], [dst_chunk], what="get")

    def reduce(self, local_src_chunk, remote_src_chunks, tb, local_dst_chunk=None):
        """REDUCE a local chunk with chunks of the peer into a local chunk."""
        for c in remote_src_chunks:
            self._check(c, self.dst, "reduce")
        return Rank(self.src).reduce(local_src_chunk, remote_src_chunks, tb, dst_chunk=local_dst_chunk)


class PortChannel(_Channel):
    """A channel whose puts go through a proxy. The library takes channel
    types from the links, so this is a memory channel where the link is."""

    ctype = "port"

    def flush(self, tb):
        """Records land in order in Braid: lowers to a NOP (the IR's FLUSH is
        refused by the verifier)."""
        return self.prog.emit(self.src, tb, {"op": "nop"})

    def put_with_signal_and_flush(self, dst_chunk, src_chunk, tb):
        self.put_with_signal(dst_chunk, src_chunk, tb)
        return self.flush(tb)


class SwitchChannel:
    """A switch (NVLS multicast) channel: it reaches the same scratch slot
    (or switch semaphore) of every rank at once. Braid's switch channels
    span all the plan's ranks and reach scratch only; one per program.
    `sw.at_rank(r)` gives rank r's end, with reduce, broadcast and barrier."""

    def __init__(self, rank_list, buffer_type="scratch"):
        prog = current_program()
        if sorted(rank_list) != list(range(prog.num_ranks)):
            raise PlanError("a switch channel spans every rank of the plan (ranks 0..%d)"
                            % (prog.num_ranks - 1))
        if buffer_type != "scratch":
            raise PlanError("switch channels reach scratch slots only (buffer_type \"scratch\"): "
                            "copy input chunks into scratch first")
        if prog.protocol != "Simple":
            raise PlanError("switch channels run the Simple protocol only")
        if prog.switch is not None:
            raise PlanError("a plan has at most one switch channel")
        prog.switch = self
        self.prog = prog
        self.bar_count = {}

    def at_rank(self, rank):
        return _SwitchEnd(self, rank)


class _SwitchEnd:
    def __init__(self, sw, rank):
        self.sw, self.prog, self.rank = sw, sw.prog, rank

    def _slot(self, offset, size):
        index = offset.index if isinstance(offset, Chunk) else int(offset)
        if isinstance(offset, Chunk) and offset.kind != "scratch":
            raise PlanError("rank %d: switch ops name scratch slots, not %r" % (self.rank, offset))
        if index + size > self.prog.nslots:
            raise PlanError("rank %d: switch slots %d..%d pass the %d scratch slots allocated"
                            % (self.rank, index, index + size - 1, self.prog.nslots))
        return {"buf": "scratch", "chan": SWITCH, "peer": -1, "index": index}

    def _chunk_of(self, refs, slot_index, what, tb):
        for c in refs:
            if c.kind in ("input", "output"):
                return c.index % self.prog.nchunks
        held = self.prog.slot_chunk.get((self.rank, slot_index))
        if held is None:
            raise PlanError("rank %d tb %d %s: moves scratch only and no earlier op put a chunk in "
                            "slot %d" % (self.rank, tb, what, slot_index))
        return held

    def reduce(self, buffer_offset, size, dst_chunk, tb, broadcast_offset=None, postop=None):
        """MC_REDUCE: slots buffer_offset .. +size of every rank's scratch,
        reduced, into the local dst_chunk (a chunk, a list, or None) and,
        with broadcast_offset, into those slots of every rank's scratch."""
        src = self._slot(buffer_offset, size)
        if dst_chunk is None:
            dsts = []
        elif isinstance(dst_chunk, (list, tuple)):
            dsts = list(dst_chunk)
        else:
            dsts = [dst_chunk]
        for d in dsts:
            if d.rank != self.rank or d.size != size:
                raise PlanError("rank %d tb %d switch reduce: destination %r must be local "
                                "and %d chunks"
                                % (self.rank, tb, d, size))
        refs = [src] + [self.prog.ref(self.rank, d) for d in dsts]
        if broadcast_offset is not None:
            refs.append(self._slot(broadcast_offset, size))
        if len(refs) < 2:
            raise PlanError("rank %d tb %d switch reduce: no destination" % (self.rank, tb))
        chunk = self._chunk_of(dsts, src["index"], "switch reduce", tb)
        if postop is None:
            postop = self.prog.collective.reduction
        op = {"op": "mc_reduce", "chunk": chunk, "nchunks": size, "nsrc": 1, "ndst": len(refs) - 1,
              "refs": refs}
        if postop:
            op["flags"] = ["postop"]
        if broadcast_offset is not None:
            for r in range(self.prog.num_ranks):
                for t in range(size):
                    self.prog.slot_chunk[(r, refs[-1]["index"] + t)] = chunk + t
        return self.prog.emit(self.rank, tb, op)

    def broadcast(self, src_chunk, buffer_offset, size, tb, combine=False):
        """MC_STORE (MC_RED with combine=True): the local src_chunk into
        slots buffer_offset .. +size of every rank's scratch."""
        if src_chunk.rank != self.rank or src_chunk.size != size:
            raise PlanError("rank %d tb %d switch broadcast: source %r must be local and %d chunks"
                            % (self.rank, tb, src_chunk, size))
        dst = self._slot(buffer_offset, size)
        if src_chunk.kind == "scratch":
            chunk = self._chunk_of([], src_chunk.index, "switch broadcast", tb)
        else:
            chunk = src_chunk.index % self.prog.nchunks
        op = {"op": "mc_red" if combine else "mc_store", "chunk": chunk, "nchunks": size,
              "nsrc": 1, "ndst": 1, "refs": [self.prog.ref(self.rank, src_chunk), dst]}
        for r in range(self.prog.num_ranks):
            for t in range(size):
                self.prog.slot_chunk[(r, dst["index"] + t)] = chunk + t
        return self.prog.emit(self.rank, tb, op)

    def barrier(self, tb, sem=0):
        """MC_BARRIER: every rank's n-th barrier on switch semaphore `sem`
        (k = n) joins all ranks; one thread block per rank and semaphore."""
        key = (self.rank, sem)
        self.sw.bar_count[key] = self.sw.bar_count.get(key, 0) + 1
        self.prog.switch_sems = max(self.prog.switch_sems, sem + 1)
        self.prog.sync_max = max(self.prog.sync_max, self.sw.bar_count[key])
        ref = {"buf": "sem", "chan": SWITCH, "peer": -1, "index": sem}
        return self.prog.emit(self.rank, tb, {"op": "mc_barrier", "k": self.sw.bar_count[key],
                                              "ndst": 1, "refs": [ref]})


SWITCH = "switch"  # placeholder channel of switch refs, resolved when lowered
