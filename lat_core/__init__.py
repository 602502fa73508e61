"""LAT core: plans, the journal, the engine, monitoring and triage.

Never imports textual/rich (the UI) nor torch/transformers/peft/fla/datasets (those live only in
``lat_core.train``, which runs in the job subprocesses), so front ends start fast.
"""

__version__ = "0.1.0"
