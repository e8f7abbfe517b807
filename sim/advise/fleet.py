"""The advisor's fleets: a scenario served by a candidate's replicas behind each router given, at a rate; the best router's figures.

A candidate here is a replica's tiers times ``replicas``; its figures are the
fleet's (``sim.fleet.simulate``), every request arriving as ``serving`` says
(an open loop at a rate: the load a single server cannot take is what more
replicas are bought for). Of the routers given, the one with the lowest TTFT
at the figure the target bounds is the candidate's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.advise.candidate import Candidate, Outcome
from sim.advise.workloads import ScenarioWorkload, outcome_of
from sim.bounds.budget import SUMMARY_JSON_BYTES, Cost
from sim.fleet.settings import FleetSettings
from sim.fleet.simulate import scenario_fleet_cost, simulate_fleet
from sim.sched.serving import Serving

DEFAULT_ROUTER = "affinity"


@dataclass(frozen=True)
class FleetWorkload(ScenarioWorkload):
    """A scenario's requests through a fleet of each candidate's replicas, under each of ``routers``."""

    serving: Serving = field(default_factory=Serving)
    routers: tuple[str, ...] = (DEFAULT_ROUTER,)
    figure: str = "p90_ms"  # the TTFT figure the best router is chosen by

    def _settings(self, candidate: Candidate) -> FleetSettings:
        return FleetSettings(replicas=candidate.replicas, routers=self.routers)

    def cost(self, candidate: Candidate) -> Cost:
        one = scenario_fleet_cost(self._at(candidate), self.serving, self._settings(candidate))
        return Cost(one.work_steps, one.memory_bytes, SUMMARY_JSON_BYTES)

    def evaluate(self, candidate: Candidate, pass_: int | None) -> Outcome:
        scenario = self._at(candidate)
        result, _ = simulate_fleet(scenario, self.serving, self._settings(candidate))
        outcomes = [
            outcome_of([(r["prompt_tokens"], r["gpu_hit_tokens"], r["tier_hits"], r["ttft_ms"]) for r in entry["requests"]
                        if pass_ is None or r["pass"] == pass_], scenario, entry["router"])
            for entry in result["routers"]
        ]
        # The routers in the order given: a tie keeps the first.
        return min(outcomes, key=lambda o: getattr(o, self.figure))

    @property
    def working_set_tokens(self) -> int | None:
        """None: a replica holds its share of the requests in flight, which only the router decides, so GPU sizes
        start at one request (a single server's working set would overstate every replica's)."""
        return None

    def working_set_cost(self) -> Cost:
        return Cost(0, 0, 0)

    def searching(self, candidates: int) -> FleetWorkload:
        return self
