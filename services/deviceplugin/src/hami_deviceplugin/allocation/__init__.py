"""The Allocate path every plugin shares: which pod a call is for (the identity rule, over the
node's pods from a watch and the kubelet's pod-resources listing), its annotation entries, what a
plugin decides, and the flow that decides, commits and unlocks."""
