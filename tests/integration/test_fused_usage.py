"""A fused group's memory is the group's: measured for the group with its member count, never split
into per-member shares, and remembered as what a group of that size needs (real trainer, CPU)."""
from pathlib import Path

import pytest

from lat_core.engine.loop import Engine
from lat_core.store import Store
from tests.helpers.journal import restore_journal, snapshot_journal
from tests.integration.test_engine_fused import (MEMBERS, base, by_key, drain, make_run,  # noqa: F401 - base: fixture
                                                 stepped)

pytestmark = pytest.mark.xdist_group("engine_fused")


def test_a_groups_usage_is_recorded_for_the_group_with_its_size(tmp_path, base):  # noqa: F811
    store, run_id = make_run(tmp_path, base, "true")
    drain(Engine(store, sample_every_s=0.1))
    members = by_key(store, run_id)
    assert {j.state for j in members.values()} == {"succeeded"}
    assert {j.fused_group for j in members.values()} == {f"{members['a'].id}.1"}
    group = store.fused_group(members["a"].fused_group)
    assert group.members == 3 and group.peak_rss >= group.full_rss > 0
    for job in members.values():  # no made-up share on a member's row
        assert (job.rss, job.peak_rss, job.gpu_mem, job.peak_gpu) == (None, None, None, None)
        assert store.group_peaks(job.profile_key) == {3: (0, group.full_rss)}
        assert store.config_peak(job.profile_key) is None  # a group's peak is no job alone's


def test_an_adopted_groups_members_stay_its_members(tmp_path, base):  # noqa: F811
    """A journal that lost a running group's attempts: the adopted members' usage is still the group's."""
    store, run_id = make_run(tmp_path, base, "true", slots=2, **{k: {"max_steps": 40} for k in MEMBERS})
    journal = Path(store.path)
    before = snapshot_journal(journal)
    drain(Engine(store), until=lambda: stepped(by_key(store, run_id)["a"]))
    store.close()
    restore_journal(journal, before)
    store = Store(journal)
    drain(Engine(store, sample_every_s=0.1), timeout=300)
    members = by_key(store, run_id)
    assert {j.state for j in members.values()} == {"succeeded"}
    assert {j.fused_group for j in members.values()} == {f"{members['a'].id}.1"}
    group = store.fused_group(members["a"].fused_group)
    assert group.members == 3 and group.peak_rss > 0
    assert all(j.peak_rss is None for j in members.values())
