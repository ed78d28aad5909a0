"""The kube-scheduler stand-in: its configuration, queue, in-tree predicates, HTTP extenders
and the loop that schedules pending pods."""
