"""Node annotations: the device registry, pair scores, the handshake and the node lock."""
