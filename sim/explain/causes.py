"""The cause vocabulary of a missed token, and the precedence that picks one cause when several apply.

Every token a tier did not serve gets exactly one cause, so each request's map
sums to its missed tokens. Structural causes come first, because a cache of
any size would miss those tokens too; then the history of the tier:

1. ``partial-block`` / ``partial-chunk``: the token lies past the last full
   unit, which the tier never caches (vLLM caches full blocks only; LMCache
   stores full chunks only unless ``save_unfull_chunk``);
2. ``last-token``: the unit (GPU) or token (offload, where the hit is clipped
   token-exactly) that vLLM's rule "recompute the last prompt token" costs;
3. ``first-seen``: the tier never held this unit (with this prefix) before;
4. ``evicted``: the tier held it and evicted it (the detail names the tier and
   the evicting request);
5. ``chain-broken``: the tier holds it, but an earlier unit of the prefix
   missed, and lookups stop at the first miss;
6. ``not-stored``: the tier never held it because its store was refused and
   dropped: the blocks it had to evict were still being written (vLLM's
   native offloading, step for step: ``sim.sched.offloading``);
7. ``not-asked``: the tier was not consulted for these tokens under the active
   rules (none under the ``brief`` rules, which ask the offload tiers about
   the whole prompt; kept for backends that skip a lookup).

3, 4, 5 and 6 exclude each other (never held / held and gone / held now /
never held, its store dropped), so the order among them only documents the
vocabulary.
"""

from __future__ import annotations

PARTIAL_BLOCK = "partial-block"
PARTIAL_CHUNK = "partial-chunk"
LAST_TOKEN = "last-token"
FIRST_SEEN = "first-seen"
EVICTED = "evicted"
CHAIN_BROKEN = "chain-broken"
NOT_STORED = "not-stored"
NOT_ASKED = "not-asked"

PRECEDENCE: tuple[str, ...] = (
    PARTIAL_BLOCK, PARTIAL_CHUNK, LAST_TOKEN, FIRST_SEEN, EVICTED, CHAIN_BROKEN, NOT_STORED, NOT_ASKED,
)
CAUSES = frozenset(PRECEDENCE)

# Misses that a tier of unbounded size would have too (the floor of the infinite-cache bound).
STRUCTURAL = frozenset({PARTIAL_BLOCK, PARTIAL_CHUNK, LAST_TOKEN})

DESCRIPTIONS: dict[str, str] = {
    PARTIAL_BLOCK: "past the last full block, which vLLM never caches",
    PARTIAL_CHUNK: "past the last full chunk, which the offload tier never stores",
    LAST_TOKEN: "vLLM always recomputes the last prompt token",
    FIRST_SEEN: "never held by the tier before",
    EVICTED: "held by the tier, then evicted",
    CHAIN_BROKEN: "held, but after an earlier miss in the prefix",
    NOT_STORED: "not stored: the tier's blocks were still being written",
    NOT_ASKED: "the tier was not asked for them",
}


# Short names for a legend.
LABELS: dict[str, str] = {
    PARTIAL_BLOCK: "past the last full block",
    PARTIAL_CHUNK: "past the last full chunk",
    LAST_TOKEN: "the last token",
    FIRST_SEEN: "first seen",
    EVICTED: "evicted",
    CHAIN_BROKEN: "after an earlier miss",
    NOT_STORED: "not stored",
    NOT_ASKED: "not asked",
}


def ordered(causes: dict[str, int]) -> dict[str, int]:
    """The map in precedence order, without empty causes (the JSON form)."""
    return {c: causes[c] for c in PRECEDENCE if causes.get(c)}
