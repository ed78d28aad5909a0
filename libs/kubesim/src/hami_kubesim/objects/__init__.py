"""What the API server does to objects besides storing them: resource types, per-kind
strategies, validation, patch bodies, quantities, timestamps and server-side tables.  Pure."""
