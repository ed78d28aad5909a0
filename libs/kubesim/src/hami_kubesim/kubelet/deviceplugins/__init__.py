"""The kubelet stand-in's device-plugin side (``pkg/kubelet/cm/devicemanager``): the
``Registration`` server and plugin connections (``registration``), the per-resource device lists
and allocation ledger (``devices``) and the device manager that admits a pod's containers
through the plugins' ``Allocate`` and ``PreStartContainer`` (``devicemanager``)."""
