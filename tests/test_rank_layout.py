"""ddp_lab.course.rank_layout: the one owner of which ranks form the tp, dp and pp groups (Megatron order)."""

import pytest

from ddp_lab.plan import Strategy
from ddp_lab.course.rank_layout import Group, RankLayout


def test_megatron_order_tp_fastest_then_dp_then_pp():
    layout = RankLayout(dp=2, tp=2, pp=2)
    assert layout.groups("tp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert layout.groups("dp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert layout.groups("pp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert layout.group_of("dp", 5) == [5, 7]


def test_every_rank_is_in_exactly_one_group_per_axis():
    layout = RankLayout(dp=3, tp=4, pp=2)   # unequal degrees: a swapped stride would show
    for axis in ("tp", "dp", "pp"):
        members = sorted(r for ranks in layout.groups(axis) for r in ranks)
        assert members == list(range(24))
        assert all(len(ranks) == getattr(layout, axis) for ranks in layout.groups(axis))


def test_the_planner_costs_the_groups_the_layout_makes():
    strategy = Strategy(dp=4, tp=8, pp=2)
    assert strategy.layout.group("tp") == Group(8, 1)
    assert strategy.layout.group("dp") == Group(4, 8)
    assert strategy.layout.group("pp") == Group(2, 32)
    for axis in ("tp", "dp", "pp"):   # size and stride describe the real rank lists
        group = strategy.layout.group(axis)
        first = strategy.layout.groups(axis)[0]
        assert first == [k * group.stride for k in range(group.size)]


def test_a_group_spans_nodes_exactly_when_some_real_group_has_ranks_in_two_nodes():
    # brute force over the rank lists: odd degrees put node boundaries inside blocks (a cp 3 ring on 8-GPU nodes,
    # 64-rank blocks on 72-GPU NVL72 domains), where a size x stride > node test alone says "inside one node"
    spans_seen = set()
    for degrees in (dict(dp=4, tp=2, cp=3), dict(dp=2, tp=4, cp=3, pp=2), dict(dp=16, tp=4, pp=2, cp=1),
                    dict(dp=3, tp=8), dict(dp=9, tp=2, cp=4), dict(dp=2, tp=2)):
        layout = RankLayout(**degrees)
        for axis in ("tp", "cp", "dp", "pp", "dp_cp"):
            for per_node in (4, 8, 16, 72):
                real = any(len({rank // per_node for rank in ranks}) > 1 for ranks in layout.groups(axis))
                assert layout.group(axis).spans_nodes(per_node) == real, (degrees, axis, per_node)
                spans_seen.add((axis, per_node, real))
    assert ("cp", 8, True) in spans_seen and ("dp", 72, True) in spans_seen   # the misaligned cases were met


def test_ranks_in_a_node_are_the_fewest_and_most_any_real_group_has_in_a_node_it_touches():
    for degrees in (dict(dp=4, tp=2, cp=3), dict(dp=16, tp=4, pp=2), dict(dp=3, tp=8), dict(dp=9, tp=2, cp=4),
                    dict(dp=36, tp=4), dict(dp=2, tp=2)):
        layout = RankLayout(**degrees)
        for axis in ("tp", "cp", "dp", "pp", "dp_cp"):
            for per_node in (4, 8, 16, 72):
                counts = [list(rank // per_node for rank in ranks).count(node)
                          for ranks in layout.groups(axis) for node in {rank // per_node for rank in ranks}]
                assert layout.group(axis).ranks_in_a_node(per_node) == (min(counts), max(counts)), \
                    (degrees, axis, per_node)
    assert Group(3).spans_nodes(8) is False   # a group alone is its job's one block


def test_ranks_in_a_node_of_any_size_stride_and_job_match_the_groups_rank_by_rank():
    # the groups of Group(size, stride, world) listed rank by rank: blocks of size x stride, `stride` groups in each
    for per_node in (4, 8, 72):
        for size in range(1, 11):
            for stride in (1, 2, 3, 5, 6, 7, 8, 9, 16, 72):
                block = size * stride
                for world in (None, block, 2 * block, 5 * block, 9 * block):
                    in_node = {}
                    for rank in range(world or block):
                        key = (rank // block, rank % stride, rank // per_node)   # (block, group in it, node)
                        in_node[key] = in_node.get(key, 0) + 1
                    counts = in_node.values()
                    group = Group(size, stride, world=world)
                    if group.spans_nodes(per_node):
                        assert group.ranks_in_a_node(per_node) == (min(counts), max(counts)), (size, stride, world)
                    else:
                        assert group.ranks_in_a_node(per_node) == (size, size) and max(counts) == size


def test_degrees_must_multiply_to_the_ranks():
    with pytest.raises(ValueError, match=r"dp x tp x pp = 2 x 2 x 1 = 4, but there are 8 ranks"):
        RankLayout(dp=2, tp=2).check(8)
    with pytest.raises(ValueError, match=r"tp=0: each parallel degree must be a positive int"):
        RankLayout(tp=0)


def test_cp_sits_between_tp_and_dp_and_ep_is_carved_out_of_dp_x_cp():
    """Megatron-Core's order tp-cp-ep-dp-pp on 16 ranks (tp 2, cp 2, dp 2, pp 2, ep 2): a cp group takes every
    tp-th rank, the dp x cp ranks that hold the same weights every tp-th rank of a pp block, an ep group ep of
    those, and the ranks holding the same experts every (tp x ep)-th."""
    layout = RankLayout(dp=2, tp=2, pp=2, cp=2, ep=2)
    assert layout.world_size == 16
    assert layout.group_of("cp", 0) == [0, 2] and layout.group_of("dp", 0) == [0, 4]
    assert layout.group_of("pp", 0) == [0, 8]
    assert layout.group_of("dp_cp", 1) == [1, 3, 5, 7]
    assert layout.group_of("ep", 0) == [0, 2] and layout.group_of("edp", 0) == [0, 4]
    for axis in ("tp", "cp", "dp", "pp", "dp_cp", "ep", "edp"):   # every rank in exactly one group
        assert sorted(r for ranks in layout.groups(axis) for r in ranks) == list(range(16))
    assert RankLayout(dp=2, tp=2, pp=2) == RankLayout(dp=2, tp=2, pp=2, cp=1, ep=1)
    with pytest.raises(ValueError, match=r"ep=3 does not divide dp x cp = 4"):
        RankLayout(dp=2, cp=2, ep=3)
    with pytest.raises(ValueError, match=r"dp x tp x pp x cp = 2 x 1 x 1 x 2 = 4, but there are 8 ranks"):
        RankLayout(dp=2, cp=2).check(8)
