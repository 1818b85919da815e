"""How `ddp_lab.launch` starts ranks, watches them and reports what they did.

Starting (procstart, zygote, worker), meeting (rendezvous, backend), watching (supervisor,
output, reports) and the results and errors a launch returns. Introduced in lesson 00.
"""
