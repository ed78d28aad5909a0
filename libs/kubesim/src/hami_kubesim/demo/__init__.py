"""The ``make demo`` driver (``python -m hami_kubesim.demo``, described in :mod:`.cli`): the
whole system end to end on one machine, its example pods submitted and their outcomes checked.

:mod:`.cluster` holds the demo's nodes and system spec, :mod:`.examples` the example folders
and how they are read, :mod:`.submit` the run once the system is up (submit, wait, report) and
:mod:`.cli` the start-up and the command line.  The package re-exports the names tests and
``tests/deploy`` read (nodes, example folders) so ``hami_kubesim.demo`` stays their import path.
"""

from hami_kubesim.demo.cli import main, run_demo
from hami_kubesim.demo.cluster import (
    DEMO_NODES,
    DRA_NODE,
    PREEMPTION_MODE,
    PREEMPTION_NODE,
    demo_spec,
)
from hami_kubesim.demo.examples import (
    DRA_EXAMPLES,
    EXAMPLE_KINDS,
    EXAMPLES_DIR,
    PREEMPTION_EXAMPLES,
    VENDOR_EXAMPLES,
    load_examples,
)

__all__ = [
    "DEMO_NODES",
    "DRA_EXAMPLES",
    "DRA_NODE",
    "EXAMPLES_DIR",
    "EXAMPLE_KINDS",
    "PREEMPTION_EXAMPLES",
    "PREEMPTION_MODE",
    "PREEMPTION_NODE",
    "VENDOR_EXAMPLES",
    "demo_spec",
    "load_examples",
    "main",
    "run_demo",
]
