"""The DRA incidents of the fault scenarios, as timelines: they happen on a DRA node only, with
claims and pods named from the seed, and put back what they take away."""

from __future__ import annotations

from hami_kubesim.stack.chaos.dra import CLAIMS, DRA_INCIDENTS, claim_pod_manifest
from hami_kubesim.stack.chaos.incidents import incident_named
from hami_kubesim.stack.chaos.scenarios import (
    AwaitRunning,
    CreateObject,
    CreatePod,
    DeleteObject,
    DeletePod,
    PauseKubelet,
    ResumeKubelet,
    ScenarioConfig,
    SetGpusHealthy,
    StartService,
    StopService,
    describe,
    generate_scenario,
    incident_scenario,
)

CONFIG = ScenarioConfig(
    services=("webhook", "scheduler-0", "deviceplugin-n1", "deviceplugin-dra-1"),
    nodes=("n1",),
    dra_nodes=("dra-1",),
    incidents=DRA_INCIDENTS,
    incident_share=1.0,
)


def _steps(name: str, seed: int = 7, config: ScenarioConfig = CONFIG) -> list[object]:
    return list(incident_scenario(incident_named(name), seed, config).steps)


def test_dra_incidents_target_the_dra_node_and_need_one() -> None:
    for incident in DRA_INCIDENTS:
        steps = _steps(incident.name)
        pods = [s.pod for s in steps if isinstance(s, CreatePod)]
        assert pods, incident.name
        for pod in pods:
            assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "dra-1"}
            assert pod["spec"]["schedulerName"] == "default-scheduler"
            assert pod["metadata"]["name"].startswith("s7-dra-")
        assert describe(incident_scenario(incident, 7, CONFIG))
        without = ScenarioConfig(nodes=("n1",), incidents=DRA_INCIDENTS)
        assert _steps(incident.name, config=without) == []


def test_the_plugin_restarts_between_prepare_and_unprepare() -> None:
    steps = _steps("dra-plugin-restart")
    running = [s for s in steps if isinstance(s, AwaitRunning)]
    (stop,) = [s for s in steps if isinstance(s, StopService)]
    (start,) = [s for s in steps if isinstance(s, StartService)]
    (delete,) = [s for s in steps if isinstance(s, DeletePod)]
    assert stop.service == start.service == "deviceplugin-dra-1"
    assert len(running) == 2
    assert all(r.at <= stop.at for r in running)
    assert stop.at <= delete.at < start.at
    assert sum(isinstance(s, CreatePod) for s in steps) == 3


def test_the_devices_vanish_after_binding_and_come_back() -> None:
    steps = _steps("dra-device-vanished")
    (pause,) = [s for s in steps if isinstance(s, PauseKubelet)]
    (resume,) = [s for s in steps if isinstance(s, ResumeKubelet)]
    gone, back = [s for s in steps if isinstance(s, SetGpusHealthy)]
    assert (gone.healthy, back.healthy) == (False, True)
    assert pause.at < gone.at < resume.at < back.at


def test_the_claim_is_deleted_while_its_pod_starts() -> None:
    steps = _steps("dra-claim-deleted")
    (claim,) = [s for s in steps if isinstance(s, CreateObject)]
    (delete,) = [s for s in steps if isinstance(s, DeleteObject)]
    (pod,) = [s for s in steps if isinstance(s, CreatePod)]
    assert claim.resource == delete.resource == CLAIMS
    assert delete.name == claim.obj["metadata"]["name"]
    assert pod.pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": delete.name}]
    assert delete.at >= pod.at


def test_a_claim_pod_lists_its_claim_in_the_container() -> None:
    pod = claim_pod_manifest("p", CONFIG, "dra-1", template="t")
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["claims"] == [{"name": "gpu"}]
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "t"}]


def test_scenarios_draw_dra_incidents_among_the_others() -> None:
    names = {generate_scenario(seed, CONFIG).incident for seed in range(40)}
    assert names == {i.name for i in DRA_INCIDENTS}
