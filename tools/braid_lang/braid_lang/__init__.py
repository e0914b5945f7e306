"""braid_lang: write Braid plans at the level of channels and chunks.

    from braid_lang import *
    with CollectiveProgram("ring", AllReduce(4), 4, protocol="Simple") as prog:
        ...  # Rank(r), buffers, MemoryChannel(dst, src).put/signal/wait, ...

`python3 -m braid_lang check prog.py -o plan.json` runs the program, writes
Braid's plan JSON (docs/plans.md) and has `braid-plan -f` verify it.
"""

from .program import (AllGather, AllReduce, Buffer, Chunk, Collective, CollectiveProgram,
                      MemoryChannel, PlanError, PortChannel, Rank, SwitchChannel,
                      current_program, dumps, programs)

_params = {}


def param(name, default):
    """A program parameter: `check prog.py -D name=value` sets it (converted
    to the type of `default`)."""
    if name in _params:
        return type(default)(_params[name]) if default is not None else _params[name]
    return default


__all__ = ["AllGather", "AllReduce", "Buffer", "Chunk", "Collective", "CollectiveProgram",
           "MemoryChannel", "PlanError", "PortChannel", "Rank", "SwitchChannel",
           "current_program", "dumps", "param", "programs"]
