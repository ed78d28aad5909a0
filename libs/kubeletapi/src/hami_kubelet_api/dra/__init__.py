"""The kubelet's DRA plugin API (``DRAPlugin``: NodePrepareResources / NodeUnprepareResources)."""
