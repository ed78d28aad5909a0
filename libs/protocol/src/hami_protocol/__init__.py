"""The wire contract shared by the services.  Pure: no I/O.

Grouped by concern:

- ``keys``, ``errors``, ``selectors``, ``durations``: every annotation key, the one error tree,
  Kubernetes label selectors, Go durations;
- ``node/``: node annotations (device registry, pair scores, handshake, node lock);
- ``pod/``: pod annotations and what a container is given (device lists, scheduling policies,
  HAMi-core's environment variables);
- ``request/``: what pods ask for (quantities, each container's requests by HAMi's rules);
- ``config/``: ``device-config.yaml`` (defaults, vendor sections) and the per-node ``config.json``;
- ``vendor/``: the vendor table;
- ``topology/``: PCIe/NUMA layout, the RDMA register, Koordinator's joint-allocation annotations.
"""
