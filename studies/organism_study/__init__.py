"""Which credit methods find the first wrong step on the model organism, and which track
Monte Carlo."""
