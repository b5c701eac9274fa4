"""The pure scheduling core: no I/O, no wall clock, no asyncio, no Kafka.

    state = State("lab", config)
    for event in inputs:
        journal.extend(handle(state, event))   # admit -> evolve -> decide

`evolve(state, event)` folds one accepted fact or decision; `decide(state, now)`
runs one scheduling cycle and returns its decisions (already folded).
"""

from domain.admission import admit
from domain.decide import decide, handle, next_wakeup
from domain.evolve import evolve
from domain.state import State

__all__ = ["State", "admit", "decide", "evolve", "handle", "next_wakeup"]
