"""Opening and closing a store's directory: what is at the path, read-only opens, the gate of calls in flight, the cabal a store belongs to."""
