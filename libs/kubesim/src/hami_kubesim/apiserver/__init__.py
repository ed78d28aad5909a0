"""The in-memory API server: the store, history and watches, LIST, fault injection and the
seams to the stand-ins (``hooks``), all in process and driven by :class:`.server.ApiServer`; its
HTTP face (routing, discovery, OpenAPI, the watch stream, the ``/_sim`` admin endpoints) is
:mod:`.http`."""
