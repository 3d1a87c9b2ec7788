"""Which blocks of a read this worker fetches from the origin itself, in its runs: those no tier
here holds, no fetch here brings, and whose owner elsewhere (another node of the fleet; another
worker of this node whose blocks this one cannot see, in disk tiers) does not hold now. The owners
are asked before the read's answer starts, one question for each owner (the peer API's `held`).

A block its owner holds is read from it, its tiers' policies seeing the hit; the others come in
this worker's runs, one origin answer for each stretch of them pinned to the version the read
describes (If-Match), started before the answer's headers go out: a cold read costs the origin one
request, and an object overwritten meanwhile is found before a byte was sent. The blocks a run
brings that others own are offered to them (engine.lending).

What is left: a block whose owner said it held it (or was fetching it) and lost it before the read
asks for it (evicted, or its fetch stopped) is fetched by the owner then, If-Match the version; if
the object was overwritten in between, the read is cut after its headers (counted as
`read_cut_changed`, the metric gateway_reads_cut_total)."""

from __future__ import annotations

import asyncio

from gateway.cluster.fleet import Route
from gateway.cluster.membership import Member
from gateway.engine.fetch import BlockFetcher
from gateway.engine.peers import Peers
from gateway.objects import ObjectMeta
from gateway.store.blocks import BlockId


async def fetched_here(fetch: BlockFetcher, blocks: list[BlockId], meta: ObjectMeta) -> list[bool]:
    """For each of a read's blocks (of one object version): whether this worker fetches it from the
    origin (True), or reads it from a tier here, a fetch under way here, or its owner (False)."""
    here = [fetch.missing_here(block) for block in blocks]
    nodes: list[tuple[BlockId, Route]] = []
    workers: dict[int, list[BlockId]] = {}
    for block, missing in zip(blocks, here):
        if missing is not None or fetch.fetching(block):
            continue
        route = fetch.route(block.bucket, block.key, block.index)
        owner = fetch.siblings.owner(block.bucket, block.key, block.index) if fetch.siblings is not None else None
        if route is not None and fetch.peers is not None:
            nodes.append((block, route))
        elif owner is not None:
            workers.setdefault(owner, []).append(block)
    if not nodes and not workers:
        return [bool(missing) for missing in here]
    asked = {block.index for block, _ in nodes} | {block.index for group in workers.values() for block in group}
    siblings = fetch.siblings
    questions = [_ask_nodes(fetch.peers, nodes, meta)] if nodes and fetch.peers is not None else []
    if siblings is not None:
        questions += [siblings.held(owner, group, meta) for owner, group in workers.items()]
    held: set[int] = set().union(*await asyncio.gather(*questions))
    return [bool(missing) or (block.index in asked and block.index not in held)
            for block, missing in zip(blocks, here)]


async def _ask_nodes(peers: Peers, blocks: list[tuple[BlockId, Route]], meta: ObjectMeta) -> set[int]:
    """Which of `blocks` their owners hold: each owner asked once about all of its blocks, in
    rendezvous order; the blocks of an owner that does not answer are asked of their next owners,
    and when none answers, held by nobody (this worker's run brings them)."""
    held: set[int] = set()
    pending = [(block, route.ask) for block, route in blocks]
    while pending:
        groups: dict[Member, list[tuple[BlockId, tuple[Member, ...]]]] = {}
        for block, ask in pending:
            if ask:
                groups.setdefault(ask[0], []).append((block, ask[1:]))
        answers = await asyncio.gather(*(peers.held(owner, [block for block, _ in group], meta)
                                         for owner, group in groups.items()))
        pending = []
        for group, answer in zip(groups.values(), answers):
            if answer is None:
                pending.extend(group)
            else:
                held |= answer
    return held
