"""The in-memory API server: store, history and watches, LIST, fault injection, and its HTTP
face (routing, discovery, OpenAPI, the watch stream, the ``/_sim`` admin endpoints)."""
