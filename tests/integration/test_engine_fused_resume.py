"""A fused group warned of its time limit (SIGUSR1 to its runner, as Slurm's ``--signal`` sends it):
every member saves and leaves to be resumed; the engine resubmits them with --resume once all of
them have saved, so they train in one group again instead of the first one out starting alone."""
import os
import signal

import pytest

from lat_core.contract.commands import CancelRun
from lat_core.contract.jobdir import JobDir, Started
from lat_core.engine.loop import Engine
from tests.integration.test_engine_fused import LONG, by_key, drain, make_run, stepped

pytestmark = pytest.mark.xdist_group("engine_fused")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from tests.helpers.fused import saved_tiny_base
    return saved_tiny_base(tmp_path_factory.mktemp("fused_resume") / "base")


def resumed_from(job) -> list:
    return [e.resumed_from for e in JobDir(job.job_dir).read_events().of(Started)]


def test_members_that_saved_at_the_warning_resume_together_in_one_group(tmp_path, base):
    store, run_id = make_run(tmp_path, base, "true", slots=3, **{k: LONG for k in "abc"})  # free slots: none waits for one
    engine = Engine(store)
    drain(engine, until=lambda: all(stepped(j) for j in store.jobs(run_id)))
    [runner] = {store.attempts(j.id)[0].pid for j in store.jobs(run_id)}
    os.kill(runner, signal.SIGUSR1)  # the runner passes it on to the group's trainer
    drain(engine, until=lambda: all(len(resumed_from(j)) == 2 for j in store.jobs(run_id)))
    jobs = by_key(store, run_id)
    firsts = {k: store.attempts(j.id)[0] for k, j in jobs.items()}
    assert {a.returncode for a in firsts.values()} == {75}
    seconds = {store.attempts(j.id)[1].pid for j in jobs.values()}
    assert len(seconds) == 1 and seconds != {runner}  # one group again, a new process
    for job in jobs.values():
        saved = JobDir(job.job_dir).latest_checkpoint()[0]
        assert resumed_from(job) == [None, saved] and "--resume" in store.job(job.id).argv
    store.add_command(run_id, CancelRun())
    drain(engine)
    assert {j.state for j in store.jobs(run_id)} == {"cancelled"}
