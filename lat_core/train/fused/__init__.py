"""One process, one frozen base model, several same-base LoRA jobs (issue 17, stage 2).

Why: a suite's small LoRA jobs are bound by the CPU when each runs in its own process; one process
that runs the rows of all of them through one base model does the launch work once per step.

- stacked.py: the layer that replaces a targeted projection: the jobs' LoRA A/B stacked (ranks
  zero-padded to the largest), applied to each job's own rows with one batched matmul.
- members.py: installs stacked layers into a base from each job's own PEFT initialisation, gives
  each job its own parameters (views of the stacks) and writes PEFT-compatible adapters.
- step.py: per-job micro-batches, losses, optimizers, schedules and accumulation.
- group.py: a group from its members' configs (one base, one tokenizer, each member's init).
- member_io.py, runner.py, __main__.py: a group of prepared job folders trained together, each
  member writing what a job of its own writes.

Reference design: mLoRA (TUDB-Labs/mLoRA), which batches several LLaMA adapters over one base.
"""
