"""Analyses the paper runs on its benchmark: missing-label noise between domains."""
