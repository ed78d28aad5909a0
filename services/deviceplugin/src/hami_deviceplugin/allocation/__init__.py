"""The Allocate path every plugin shares: which pod a call is for, its annotation entries, and
the flow that decides, commits and unlocks."""
