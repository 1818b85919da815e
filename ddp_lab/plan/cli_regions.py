"""The command line's cross-region link and DiLoCo notes: --region-nodes, --cross-region-gbps/-latency-ms, --sync-every.

`python -m ddp_lab plan` (cli.py) builds the cluster's cross-region link from the flags here and prints which
parallel groups cross it, with the outer sync's share of each step (outer_sync.py).

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

from ddp_lab.course.plan import expert_tp, outer_sync
from ddp_lab.course.plan.collectives import axes_across_regions, spans_regions
from ddp_lab.plan.cli_flags import SLOWEST_LATENCY_MS, SLOWEST_LINK_GBPS, check_number


def _regions_text(cluster) -> str:
    return (f"note: regions of {cluster.region_nodes} node(s) joined by a {cluster.cross_region_bandwidth * 8 / 1e9:g} "
            f"Gb/s link")


def search_regions_note(cluster) -> str:
    """A search's note that its plans are charged for the link between regions (regions_note names one plan's)."""
    if cluster.region_nodes is None:
        return ""
    return (f"{_regions_text(cluster)} ({cluster.cross_region_latency * 1e3:g} ms one way): every plan is charged "
            f"for what its groups send across it\n")


def regions_note(model, cluster, strategy) -> str:
    """Notes naming the parallel groups that cross the link between regions, and the outer sync's share per step."""
    notes = ""
    if cluster.region_nodes is not None:
        axes = [f"{axis} groups" for axis in axes_across_regions(cluster, outer_sync.inner_strategy(strategy).layout)]
        if strategy.ep > 1 and spans_regions(cluster, expert_tp.group(strategy, "ep")):   # the all-to-all's group
            axes.append("ep groups (the MoE all-to-all)")
        if strategy.replicas > 1 and spans_regions(cluster, outer_sync.outer_group(strategy)):
            axes.append("the DiLoCo replicas' outer sync")
        notes += f"{_regions_text(cluster)}; across it: {', '.join(axes) or 'nothing'}\n"
    if strategy.replicas > 1:
        seconds = outer_sync.seconds_per_step(model, cluster, strategy)
        every = "step" if strategy.sync_every == 1 else f"{strategy.sync_every} steps"
        notes += (f"note: {strategy.replicas} DiLoCo replicas sync every {every}: "
                  f"{seconds:.3f} s per step, in the total below\n")
    return notes


def cross_region(cluster, args):
    """The cluster with the cross-region link the flags describe (--region-nodes, --cross-region-gbps/-latency-ms)."""
    link = (args.cross_region_gbps, args.cross_region_latency_ms)
    if args.region_nodes is None:
        if link != (None, None):
            raise ValueError("--cross-region-gbps/--cross-region-latency-ms describe the link between regions: add "
                             "--region-nodes N (nodes per region)")
        return cluster
    changes = {"region_nodes": args.region_nodes}
    check_number("cross_region_gbps", args.cross_region_gbps, at_least=SLOWEST_LINK_GBPS)
    check_number("cross_region_latency_ms", args.cross_region_latency_ms, zero_allowed=True,
                 at_most=SLOWEST_LATENCY_MS, unit="ms")
    if args.cross_region_gbps is not None:
        changes["cross_region_bandwidth"] = args.cross_region_gbps * 1e9 / 8
    if args.cross_region_latency_ms is not None:
        changes["cross_region_latency"] = args.cross_region_latency_ms / 1e3
    return cluster.with_(**changes)
