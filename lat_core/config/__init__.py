"""Torch-free configuration shared by every process: the job schema (job.py) and the value kinds it
shares with the environment table (values.py, env.py), peft specs, suites, datasets, paths."""
