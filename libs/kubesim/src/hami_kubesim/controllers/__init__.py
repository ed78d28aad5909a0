"""Stand-ins for kube-controller-manager's controllers: the disruption controller
(:mod:`.disruption`, its decisions in :mod:`.budgets`) and the resourceclaim controller
(:mod:`.resourceclaim`, its decisions in :mod:`.claims`)."""
