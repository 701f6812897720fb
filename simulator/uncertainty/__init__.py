"""Predictions with error bars: declared input uncertainty, propagated by Monte Carlo."""
