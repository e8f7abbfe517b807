"""The dashboard's views: each its own URL and nav entry, the areas it shows, and whether it shows the scenario sidebar.

One definition: the nav bar, the routes and the page template all read ``VIEWS``. A view's areas are partials of
``templates/`` (each loads itself or is rendered with the page); the sidebar is in the views whose panels use its
scenario (Simulate plays it, Plan's curves, what-ifs and advisor read it), and absent from the others.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class View:
    """One view of the dashboard: ``name`` (also ``data-view`` on ``<main>``), its path, its nav label and title."""

    name: str
    path: str
    label: str
    title: str
    areas: tuple[str, ...]
    sidebar: bool = False


VIEWS = [
    View("simulate", "/", "Simulate", "a scenario, request by request", ("views/run_area.html",), sidebar=True),
    View("replay", "/replay", "Trace replay", "a request trace through the tiers", ("replay/area.html",)),
    View("plan", "/plan", "Plan", "measurements, calibration, capacity and sizing", ("analysis/area.html",), sidebar=True),
    View("live", "/live", "Live & Watch", "a real server, driven or watched", ("live/area.html", "watch/area.html")),
    View("fleet", "/fleet", "Fleet", "replicas behind routers, compared", ("fleet/area.html",)),
    View("runs", "/runs", "Runs", "kept runs, compared", ("runs/area.html",)),
]
BY_NAME = {view.name: view for view in VIEWS}
