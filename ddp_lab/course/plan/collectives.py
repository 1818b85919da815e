"""Time of a collective over a group of GPUs placed on a cluster (lesson 02's alpha-beta model).

The ring's cost, 2(N - 1) alpha + 2(N - 1)/N n beta for an all-reduce and so on, is
ddp_lab/course/alpha_beta.py's; this module picks the link each group uses. A ring moves at the pace
of its slowest hop, so a group that spans nodes is costed on the inter-node network (at the
bandwidth of the NICs its GPUs in one node drive together: `link`), a group inside one node on NVLink,
and a group that spans regions (data centres joined by a slow link: `ClusterSpec.region_nodes`) on
its share of that link.

The latency of a ring collective is the sum over the hops one chunk travels, each at its own link's latency
(`ring_latency`): NCCL pipelines its rings chunk by chunk and lays a ring through each node's GPUs in turn, and its
cost model counts n - 1 of the N - 1 hops of a reduce-scatter or all-gather over n nodes as crossing the network, the
rest NVLink. An all-to-all (pairwise exchange) and a send keep every step at the slowest link's latency.

When the cluster carries fitted per-collective (alpha, beta) - `calibrate.this_machine()`, gloo
on this machine, fitted to what each collective adds to a step when issued right after
compute (ddp_lab.plan.calibrate) - those are used instead: lesson 02's single ping-pong fit predicts gloo's
all_reduce 2.5-9x too fast for 4 MB, mainly because a ring step sends and receives at once (two
directions copied by the same cores: 1.5-3.8x a one-way send, measured) and because the line's
bandwidth, set by small and mid-size messages, is too high for MB-sized ones; the sum itself and
the per-call cost add little (see notebooks/02-collectives.ipynb and ddp_lab.plan.calibrate). A fit made at F ranks is carried to N
ranks by the ring's own scaling: alpha by the number of steps, beta by (N - 1)/N.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from ddp_lab.course.alpha_beta import KINDS, ring_steps
from ddp_lab.course.rank_layout import Group   # a group as the planner costs it: size and stride


def link(cluster, group: Group) -> tuple[float, float]:
    """(alpha seconds, beta seconds per byte) of the slowest link the group's rings use.

    Inside a node: NVLink. Across nodes, NCCL runs one ring per NIC (a channel per NIC: on a
    DGX each GPU has its own), so a group with k GPUs in each node drives k NICs at once and
    its rings cross the node boundary at k x the per-GPU network bandwidth, at most NVLink's:
    a data-parallel group of whole nodes moves at up to 8 x 50 GB/s on a DGX H100, one GPU per
    node (a dp group beside tp = 8) at 50 GB/s (nccl-tests' bus bandwidth across nodes scales
    the same way).

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> c = ClusterSpec.preset("h100-sxm", nodes=2)
        >>> [round(1 / link(c, g)[1] / 1e9) for g in (Group(8), Group(16), Group(2, stride=8))]   # GB/s
        [450, 400, 50]
    """
    per_node = cluster.gpus_per_node
    if spans_regions(cluster, group):
        return _cross_region_link(cluster, group)
    if group.spans_nodes(per_node):
        nics = group.ranks_in_a_node(per_node)[0]   # the fewest of the group's GPUs in one node
        bandwidth = min(cluster.intra_node_bandwidth, nics * cluster.inter_node_bandwidth)
        return cluster.inter_node_latency, 1.0 / bandwidth
    return cluster.intra_node_latency, 1.0 / cluster.intra_node_bandwidth


def spans_regions(cluster, group: Group) -> bool:
    """True if the group's ranks sit in more than one region of the cluster (`ClusterSpec.region_nodes`)."""
    region = getattr(cluster, "region_gpus", None)
    return region is not None and group.spans_nodes(region)


def block_cut(block: int, gpus: int, gpus_per_node: int | None, region_gpus: int | None) -> tuple[str, int] | None:
    """The boundary, (unit, GPUs in it), that blocks of `block` consecutive ranks out of `gpus` straddle, or None: a
    block must divide the unit or be whole units. The planner costs such blocks (HSDP's shard groups, DiLoCo's
    replicas) as the first, which a cut elsewhere would make wrong.

    Example:
        >>> block_cut(12, 48, 8, 16), block_cut(16, 48, 8, 16), block_cut(4, 48, 8, 16)
        (('node', 8), None, None)
    """
    return next(((unit, size) for unit, size in (("node", gpus_per_node), ("region", region_gpus))
                 if size and gpus > size and size % block and block % size), None)


def axes_across_regions(cluster, layout) -> list[str]:
    """The parallel axes whose groups cross the link between regions (empty for a cluster of one region).

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> from ddp_lab.course.rank_layout import RankLayout
        >>> two_sites = ClusterSpec.preset("h100-sxm", nodes=4).with_(region_nodes=2)
        >>> axes_across_regions(two_sites, RankLayout(dp=4, tp=8))
        ['dp']
    """
    return [axis for axis in ("tp", "cp", "dp", "pp") if spans_regions(cluster, layout.group(axis))]


def _cross_region_link(cluster, group: Group) -> tuple[float, float]:
    """(alpha, beta) of a group whose ring crosses the link between regions.

    Every group of the same axis crosses it at once (the cluster holds cluster.gpus / group.size of them,
    each ring crossing each region boundary once each way), so each ring gets that share of the
    region's link, at most what it would get inside the region.
    """
    rings = max(1, cluster.gpus // group.size)
    inside_alpha, inside_beta = link(cluster.with_(region_nodes=None), group)
    bandwidth = min(1.0 / inside_beta, cluster.cross_region_bandwidth / rings)
    return max(inside_alpha, cluster.cross_region_latency), 1.0 / bandwidth


def collective_time(kind: str, nbytes: float, cluster, group: Group) -> float:
    """Seconds for one collective of `nbytes` (the whole tensor) over `group` on `cluster`.

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> c = ClusterSpec.preset("a100-80gb", nodes=2)
        >>> t = collective_time("all_reduce", 1e9, c, Group(size=2, stride=8))   # 1 GB, one GPU in each of 2 nodes
        >>> round(t * 1e3)                                                       # 2 * 1/2 * 1e9 / 25e9 s, in ms
        40

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown collective {kind!r}; choose one of {KINDS}")
    if group.size <= 1 and kind != "send":
        return 0.0
    size = max(group.size, 2)
    fitted = (cluster.collectives or {}).get(kind)
    if fitted is not None:
        return _scaled_fit(kind, nbytes, fitted, cluster.fitted_ranks or size, size)
    alpha, beta = link(cluster, group)
    steps, share = ring_steps(kind, size)
    if kind == "all_to_all" and group.spans_nodes(cluster.gpus_per_node) and not spans_regions(cluster, group):
        return steps * alpha + _all_to_all_bandwidth_term(nbytes, cluster, group)
    latency = ring_latency(kind, cluster, group) if kind in RING_KINDS else steps * alpha
    return latency + share * nbytes * beta


RING_KINDS = ("all_reduce", "reduce_scatter", "all_gather")


def ring_latency(kind: str, cluster, group: Group) -> float:
    """Seconds of a ring collective's latency term over `group`: the hops one chunk travels, each at its link's latency.

    A chunk of a reduce-scatter or all-gather over N ranks travels N - 1 hops, an all-reduce's 2(N - 1) (lesson
    02's ring, `ring_steps`). NCCL lays a ring through each node's GPUs in turn and pipelines the chunks, so the
    latencies add hop by hop rather than each step waiting for the ring's slowest link, and its cost model counts
    n - 1 of those hops (2(n - 1) for an all-reduce) as crossing the network for a group over n nodes, the rest as
    NVLink's (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel: a ring's latency is `(nsteps - nInterSteps) *
    intraLat + nInterSteps * interLat`, with nInterSteps = nNodes - 1, or 2 (nNodes - 1) for an all-reduce; a
    chunk that starts mid-node crosses n boundaries, one more, which the model leaves out). Of the network hops, a
    group over r regions crosses the link between regions on r - 1 (2(r - 1)). The per-hop latencies are the
    cluster's (`intra_node_latency`, `inter_node_latency`, `cross_region_latency`), not NCCL's tuning constants
    (a base latency per call, per-protocol hop latencies, and an NVLink hop's latency raised to the network's
    per-step overhead once a ring spans nodes), which it keeps to choose an algorithm.

    Example:
        >>> from ddp_lab.course.plan.cluster_spec import ClusterSpec
        >>> c = ClusterSpec.preset("h100-sxm", nodes=4)
        >>> [round(ring_latency("reduce_scatter", c, g) * 1e6) for g in (Group(8), Group(32), Group(4, stride=8))]
        [35, 170, 30]

    Of the 32-GPU group's 31 hops 3 cross the network (10 us each) and 28 NVLink (5 us); the one-GPU-per-node
    group's 3 hops all cross the network.

    Introduced in notebooks/13-plan-your-training-run.ipynb.
    """
    steps, _ = ring_steps(kind, max(group.size, 2))
    passes = 2 if kind == "all_reduce" else 1
    nodes = _units_spanned(group, cluster.gpus_per_node)
    regions = _units_spanned(group, getattr(cluster, "region_gpus", None))
    between_nodes = passes * (nodes - 1)
    between_regions = passes * (regions - 1)
    region_latency = max(cluster.inter_node_latency, cluster.cross_region_latency)
    return ((steps - between_nodes) * cluster.intra_node_latency
            + (between_nodes - between_regions) * cluster.inter_node_latency + between_regions * region_latency)


def _units_spanned(group: Group, unit_gpus: int | None) -> int:
    """The most units (nodes of `unit_gpus` GPUs, or regions) one group of the axis touches; 1 for no unit."""
    if not unit_gpus or not group.spans_nodes(unit_gpus):
        return 1
    return max(len(counts) for counts in group.node_counts(unit_gpus))


def _all_to_all_bandwidth_term(nbytes: float, cluster, group: Group) -> float:
    """Seconds an all-to-all over nodes spends moving bytes: its sends run at once, not round a ring.

    Of the n bytes a rank sends, the share for ranks on other nodes crosses the inter-node link while
    the share for the node's own ranks moves over NVLink at the same time: the slower sets the time
    (expert parallelism, lesson 14). A ring's slowest-hop rule would charge all (W - 1)/W n to the
    inter-node link, about twice too much for an ep group over two nodes.
    """
    fewest, most = group.ranks_in_a_node(cluster.gpus_per_node)   # a rank's peers in its own node, itself included
    across = (group.size - fewest) / group.size * nbytes / cluster.inter_node_bandwidth
    inside = (most - 1) / group.size * nbytes / cluster.intra_node_bandwidth
    return max(across, inside)


def _scaled_fit(kind: str, nbytes: float, fitted: tuple[float, float], at: int, size: int) -> float:
    """A fit t = alpha + beta n made at `at` ranks, carried to `size` ranks with the ring's scaling."""
    alpha, beta = fitted
    steps_at, share_at = ring_steps(kind, max(at, 2))
    steps, share = ring_steps(kind, size)
    return alpha * steps / steps_at + beta * nbytes * share / share_at
