"""The API server's mutating admission: which webhooks match, the AdmissionReview exchange, and
the dispatcher that applies their patches."""
