"""The vocabulary two processes share: torch-free, UI-free; the stdlib, PyYAML (a run's saved plan is
YAML text) and lat_core's torch-free modules only.

A value that crosses a process boundary (a job folder's files, the journal's rows) is a type here,
read once; the trainer, the engine and the front ends all ask these modules, never the files.
"""
