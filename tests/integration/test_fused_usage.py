"""A fused group's memory is the group's: measured for the group with its member count, never split
into per-member shares, and remembered as what a group of that size needs (real trainer, CPU)."""

import pytest

from lat_core.engine.loop import Engine
from tests.integration.test_engine_fused import (MEMBERS, base, by_key, drain,  # noqa: F401 - base: fixture
                                                 journal_lost_a_running_group, make_run)

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
    store, run_id = journal_lost_a_running_group(tmp_path, base)
    drain(Engine(store, sample_every_s=0.1))
    members = by_key(store, run_id)
    assert {j.state for j in members.values()} == {"succeeded"}
    assert {j.fused_group for j in members.values()} == {f"{members['a'].id}.1"}
    group = store.fused_group(members["a"].fused_group)
    assert group.members == 3 and group.peak_rss > 0
    assert all(j.peak_rss is None for j in members.values())
