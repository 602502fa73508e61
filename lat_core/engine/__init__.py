"""The engine process: the scheduler loop and everything only it runs.

``python -m lat_core.engine --state-dir DIR`` starts it (see :mod:`lat_core.front.service`). It is the only
writer of job state. Front ends never import from here except through :mod:`lat_core.front.service`;
this ``__init__`` stays empty so importing a submodule (``plan`` reads :mod:`.notify`) loads nothing else.
"""
