"""Everything that touches redis-py: connections and cluster routing, packing, the
translation of redis-py's failures, the flavor-specific helpers and subscriptions, and
the shells' shared base."""
