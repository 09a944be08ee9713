"""Choosing v̂ (the --value default) on held-out traces."""
