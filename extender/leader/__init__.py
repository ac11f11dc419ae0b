"""Work that only the Lease holder does: the election, the gate, the actor shape, the runner and the write queue.

Light on import: ``extender.leader.election`` (kubernetes-asyncio's election) is
imported only where a replica campaigns.
"""
