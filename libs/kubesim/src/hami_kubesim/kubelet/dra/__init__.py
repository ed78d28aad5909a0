"""The kubelet stand-in as a DRA host (Dynamic Resource Allocation, ``resource.k8s.io/v1``).

``watcher``: the plugin watcher on ``<kubelet dir>/plugins_registry/`` (registration handshake,
DRA drivers by name); ``plugin``: the gRPC client of one registered driver (``v1.DRAPlugin``);
``claims`` (pure): which claims a pod uses, the kubelet's checks on them, the CDI device IDs
each container gets; ``cdi`` (pure): CDI spec files and the container edits they make;
``manager``: the claim cache, NodePrepareResources before a pod starts and
NodeUnprepareResources after its last pod; ``testing``: a fake DRA driver for the tests.
"""
