"""The kube-scheduler stand-in: its configuration, queue, in-tree predicates, HTTP extenders,
the queue pump (:mod:`.loop`: watches feed the queue, one pod at a time is popped) and the
scheduling and binding cycle of one pod (:mod:`.cycle`)."""
