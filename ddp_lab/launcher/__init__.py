"""How `ddp_lab.launch` starts ranks, watches them and reports what they did.

One owner of a rank group's life (rank_group), which `launch()` and the live cluster both
drive: starting (procstart, zygote, worker), meeting (rendezvous, backend), watching (supervisor,
output, progress), reporting (stacks, reports) and stopping; the wire between the notebook and a
rank (channel); the results and errors a launch returns. Introduced in lesson 00.
"""
