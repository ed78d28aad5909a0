"""End-to-end fixtures: the whole system (kubesim + the three services as processes).

``system`` is one system shared by every test of this package that uses it (starting one takes
seconds: five Python processes on a small machine); each test works in its own namespace and
deletes its pods when done, so tests stay independent. Tests that need a differently configured
system (two extender replicas, a short handshake timeout) start their own in their module.
When a test fails, the tail of every service's log is printed with the failure.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator, Iterator

import pytest
import pytest_asyncio

from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system
from hami_kubesim.stack.system.objects import gpu_quota
from hami_kubesim.stack.system.spec import SchedulerOptions, SystemSpec, gpu_model_node

QUOTA_NAMESPACE = "team-quota"
QUOTA_MEMORY_MIB = 10000

NODES = (
    gpu_model_node("e2e-node-a", "Tesla T4", count=4, memory_mib=15360, numa_nodes=2),
    gpu_model_node("e2e-node-b", "NVIDIA A100-SXM4-40GB", count=2, memory_mib=40960, numa_nodes=2),
    gpu_model_node("e2e-node-c", "NVIDIA A10", count=4, memory_mib=23028),
)

DEFAULT_SPEC = SystemSpec(
    nodes=NODES,
    namespaces=("default", "kube-system", "hami-system", QUOTA_NAMESPACE),
    objects=(gpu_quota(QUOTA_NAMESPACE, memory_mib=QUOTA_MEMORY_MIB),),
    # Crashes mid-bind leave node locks behind; a short expiry lets the next bind take them over.
    scheduler=SchedulerOptions(node_lock_timeout="5s"),
)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def service_logs(system: System) -> str:
    parts = []
    for process in system.services():
        parts.append(f"----- {process.name} (pid {process.pid}) -----\n{process.log_tail(25)}")
    return "\n".join(parts)


@pytest.fixture(autouse=True)
def _logs_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    report = getattr(request.node, "report_call", None)
    if report is None or not report.failed:
        return
    for name in ("system", "replicated", "handshake_system", "monitored"):
        if name in request.fixturenames:
            system = request.getfixturevalue(name)
            report.sections.append((f"service logs ({name})", service_logs(system)))


@pytest.fixture
def quota() -> tuple[str, int]:
    """The namespace with a GPU memory quota in ``system``, and its limit in MiB."""
    return QUOTA_NAMESPACE, QUOTA_MEMORY_MIB


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def system() -> AsyncIterator[System]:
    async with running_system(DEFAULT_SPEC) as running:
        yield running
