"""Experiment configs, the suite registry and the environment-override layer."""
