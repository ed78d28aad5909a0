"""Fixtures: an emulated API server on a real socket and a KubeClient talking to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hami_kube.config import KubeSettings
from hami_kube.rest import KubeClient, open_client
from hami_kubesim.testing import RunningApiServer, running_apiserver


@pytest.fixture
async def sim() -> AsyncIterator[RunningApiServer]:
    async with running_apiserver(port=0) as running:
        yield running


@pytest.fixture
async def kube(sim: RunningApiServer) -> AsyncIterator[KubeClient]:
    async with open_client(KubeSettings(kube_url=sim.url, request_timeout_s=10.0)) as client:
        yield client
