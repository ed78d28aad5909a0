"""The kubelet stand-in's pod side: the pods its watch shows and what each event does to them
(``lifecycle``), the admission order and its knob (``admission``), the pod worker that admits and
starts them (``start``), the pod manager (``podmanager``), the predicate check on extended
resources (``predicate``), the status writes (``statusmanager``) and the containers playing
HAMi-core (``workloads``)."""
