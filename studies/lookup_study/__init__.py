"""The hops lookup study: localization and Monte Carlo tracking in realistic language."""
