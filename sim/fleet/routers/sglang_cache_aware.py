"""SGLang's cache-aware router: an approximate tree per worker of what it was sent, and shortest queue when unbalanced.

``sgl-router/src/policies/cache_aware.rs`` (``CacheAwarePolicy::select_worker``) and ``tree.rs``:
- a worker's load is the router's count of requests sent to it and not yet answered; the system is unbalanced
  when ``max - min > balance_abs_threshold`` and ``max > min * balance_rel_threshold``; then the request goes to
  the least-loaded worker (and is still inserted into that worker's tree);
- otherwise the tree's longest prefix match gives a match rate (matched / whole prompt); above
  ``cache_threshold`` the request goes to the worker holding that prefix, else to the worker whose tree is
  smallest (``get_smallest_tenant``: the least text, the most room);
- every ``eviction_interval_secs`` each worker's tree is cut back to ``max_tree_size`` by evicting its least
  recently used leaves (``evict_tenant_by_size``).
Defaults are the router's command line's (``sgl-router`` ``CliArgs::default``: 0.3, 64, 1.5, 120 s, 67,108,864).
The tree holds text characters; here it holds the prompt's block keys and counts tokens, so a match is
block-granular. Where several workers hold the deepest matched prefix, SGLang returns the matched node's first
tenant in its map's order; here the one that reached it last (the lower index on a tie), a deterministic stand-in.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.fleet.routers.base import InFlight, ReplicaState, RoutedRequest, Router

CACHE_THRESHOLD = 0.3
BALANCE_ABS_THRESHOLD = 64
BALANCE_REL_THRESHOLD = 1.5
EVICTION_INTERVAL_S = 120.0
MAX_TREE_SIZE = 67_108_864


class ApproximateTree:
    """The block keys of the prompts each worker was sent, each with when it was last sent one; sizes in tokens.

    One map from a key to its holders stands for SGLang's one tree whose nodes list their tenants.
    """

    def __init__(self, workers: int) -> None:
        self.nodes: dict[int, dict[int, tuple[float, int]]] = {}  # key -> {worker: (last access, depth)}
        self.size_tokens = [0] * workers

    def insert(self, worker: int, keys: Sequence[int], block_tokens: int, now_ms: float) -> None:
        for depth, key in enumerate(keys):
            holders = self.nodes.setdefault(key, {})
            if worker not in holders:
                self.size_tokens[worker] += block_tokens
            holders[worker] = (now_ms, depth)

    def prefix_match(self, keys: Sequence[int]) -> tuple[int, int | None]:
        """(blocks matched, the worker holding them): the deepest of the request's keys any worker holds."""
        matched, holders = 0, None
        for key in keys:
            found = self.nodes.get(key)
            if not found:
                break
            matched, holders = matched + 1, found
        if holders is None:
            return 0, None
        return matched, max(holders, key=lambda w: (holders[w][0], -w))

    def smallest(self) -> int:
        return min(range(len(self.size_tokens)), key=lambda w: self.size_tokens[w])

    def evict_to(self, max_tokens: int, block_tokens: int) -> None:
        """Cut each worker's tree to ``max_tokens``: least recently sent first, a chain's tail before its head."""
        for worker, size in enumerate(self.size_tokens):
            if size <= max_tokens:
                continue
            mine = sorted(
                ((at, -depth, key) for key, holders in self.nodes.items() if worker in holders
                 for at, depth in (holders[worker],))
            )
            for _, _, key in mine:
                holders = self.nodes[key]
                del holders[worker]
                if not holders:
                    del self.nodes[key]
                self.size_tokens[worker] -= block_tokens
                if self.size_tokens[worker] <= max_tokens:
                    break


class SglangCacheAware(Router):
    name = "sglang"

    def __init__(
        self,
        cache_threshold: float = CACHE_THRESHOLD,
        balance_abs_threshold: int = BALANCE_ABS_THRESHOLD,
        balance_rel_threshold: float = BALANCE_REL_THRESHOLD,
        eviction_interval_s: float = EVICTION_INTERVAL_S,
        max_tree_size: int = MAX_TREE_SIZE,
    ) -> None:
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold
        self.eviction_interval_ms = eviction_interval_s * 1000
        self.max_tree_size = max_tree_size
        self.tree: ApproximateTree | None = None
        self.load = InFlight()  # a worker's load: what the router sent it and has not heard back about
        self._last_eviction_ms = 0.0

    def route(self, request: RoutedRequest, replicas: Sequence[ReplicaState], now_ms: float) -> int:
        if self.tree is None or len(self.load.counts) != len(replicas):
            self.tree = ApproximateTree(len(replicas))
            self.load.fit(len(replicas))
        tree = self.tree
        if self.eviction_interval_ms > 0 and now_ms - self._last_eviction_ms >= self.eviction_interval_ms:
            tree.evict_to(self.max_tree_size, request.block_tokens)
            self._last_eviction_ms = now_ms
        loads = self.load.counts
        most, least = max(loads), min(loads)
        if most - least > self.balance_abs_threshold and most > least * self.balance_rel_threshold:
            chosen = loads.index(least)
        else:
            matched, owner = tree.prefix_match(request.block_keys)
            rate = matched * request.block_tokens / request.prompt_tokens if request.prompt_tokens else 0.0
            chosen = owner if rate > self.cache_threshold and owner is not None else tree.smallest()
        tree.insert(chosen, request.block_keys, request.block_tokens, now_ms)
        self.load.sent(request.seq, chosen)
        return chosen

    def finished(self, seq: int, replica: int) -> None:
        self.load.done(seq)
