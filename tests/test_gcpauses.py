"""gateway.gcpauses: a served process leaves what it loaded at start out of every garbage
collection and collects its young objects less often, yet still frees the cycles it makes, and
times every collection for gateway_gc_pause_seconds."""

from __future__ import annotations

import json
import subprocess
import sys

# In a fresh interpreter (the test process's own collector is left alone): the app's modules
# loaded, the collector tuned, then cycles made and dropped, and only ordinary allocations after
# them; no gc.collect() after the tuning's own.
PROGRAM = """
import gc, json, weakref
import gateway.app
from gateway import gcpauses
gcpauses.collect_less_often()
walked = len(gc.get_objects())  # what a full collection walks now
gcpauses.collect_less_often()  # a second call changes nothing
class Node:
    pass
freed = []
for _ in range(3_000):
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: reference counts alone never free it
    weakref.finalize(a, freed.append, 1)
del a, b
after_cycles = len(freed)
keep = [[n] for n in range(250_000)]  # new containers: collections (young, then older) run by themselves
print(json.dumps({
    "walked": walked, "frozen": gc.get_freeze_count(), "threshold": gc.get_threshold(),
    "callbacks": sum(c is gcpauses.PAUSES for c in gc.callbacks),
    "freed_at_once": after_cycles, "freed": len(freed),
    "collections": [sum(c) for c in gcpauses.PAUSES.counts], "seconds": gcpauses.PAUSES.seconds,
}))
"""


def test_startup_objects_are_frozen_and_cycles_made_later_are_still_collected() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout)
    assert found["frozen"] > 10_000 and found["walked"] < 100  # the app's modules: no collection walks them
    assert found["threshold"][0] == 10_000 and found["callbacks"] == 1
    assert found["freed_at_once"] < 3_000  # not collected before enough new objects came ...
    assert found["freed"] == 3_000  # ... then all of them, with no gc.collect() asked for
    assert found["collections"][0] >= 1 and found["seconds"][0] > 0  # and the pauses were timed


def test_garbage_made_before_the_freeze_is_not_kept_for_good() -> None:
    program = """
import gc, weakref
gc.disable()  # no collection may free it before the tuning does
from gateway import gcpauses
class Node:
    pass
freed = []
a, b = Node(), Node()
a.other, b.other = b, a
weakref.finalize(a, freed.append, 1)
del a, b  # garbage already
gc.enable()
gcpauses.collect_less_often()
print(len(freed))
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "1"  # frozen instead, it would never be freed
