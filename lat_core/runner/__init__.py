"""The detached runner between the engine and a trainer (``python -m lat_core.runner``): it leads
the job's session, contains its process tree and writes the exit record the engine reaps."""
