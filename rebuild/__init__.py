"""Recompute every derived view from the primary data to verify or repair a store."""
