"""The fused-group cost model: base + n x per-member, fitted from peaks measured at each member count."""

from lat_core.engine.member_cost import MemberCost, PriorSplit, fit, group_need

G = 2**30


def test_two_group_sizes_give_the_base_and_what_a_member_adds():
    cost = fit({4: 20 * G, 8: 36 * G}, None)
    assert cost == MemberCost(4 * G, 4 * G)
    assert (cost.need(1), cost.need(8), cost.need(16)) == (8 * G, 36 * G, 68 * G)


def test_a_job_alone_is_the_one_member_point():
    cost = fit({1: 6 * G, 8: 13 * G}, PriorSplit(5 * G, G // 4))  # two counts: the prior is not needed
    assert (cost.base, cost.per_member) == (5 * G, G)


def test_noisy_points_never_lie_above_the_line():
    points = {2: 10 * G, 4: 13 * G, 8: 22 * G}
    cost = fit(points, None)
    assert all(cost.need(n) >= p for n, p in points.items())
    assert any(cost.need(n) == p for n, p in points.items())  # as low as that allows


def test_one_group_size_with_a_prior_splits_the_peak_at_the_priors_base():
    cost = fit({4: 20 * G}, PriorSplit(base=3 * G, member_min=G // 2))
    assert (cost.base, cost.per_member) == (3 * G, 17 * G // 4)
    assert cost.need(4) == 20 * G
    assert cost.need(1) == 3 * G + 17 * G // 4  # alone: far more than a quarter of the group
    assert cost.need(8) == 37 * G               # a group of 8: far less than 8 jobs alone


def test_a_prior_base_larger_than_the_measurement_leaves_each_member_its_adapter_state():
    cost = fit({1: 2 * G}, PriorSplit(base=3 * G, member_min=G // 4))
    assert (cost.base, cost.per_member) == (2 * G - G // 4, G // 4)


def test_one_group_size_without_a_prior_bounds_fewer_members_by_the_peak_and_more_pro_rata():
    cost = fit({4: 20 * G}, None)
    assert cost.need(1) == 20 * G  # never a quarter of the group
    assert cost.need(8) == 40 * G


def test_nothing_measured_is_unknown():
    assert fit({}, PriorSplit(G, 0)) is None
    assert fit({3: 0}, None) is None


def test_a_mixed_group_pays_one_base_and_each_members_cost():
    small, large = MemberCost(3 * G, G), MemberCost(4 * G, 2 * G)
    assert group_need([small, small, large]) == 4 * G + 4 * G
    assert group_need([MemberCost(0, 5 * G, floor=20 * G)]) == 20 * G
