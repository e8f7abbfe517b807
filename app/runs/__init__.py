"""Runs kept in SQLite: every simulation, live run, replay, analysis and calibration, to list, compare, export and share.

Imports: app.proxy, sim.bounds, sim.calibration, sim.engine, sim.kvevents, sim.numeric, sim.sched, sim.simulation,
sim.workloads.
Exports: ``store`` (the database), ``recording`` (keeping a run as it goes), ``schema``, ``compare``, ``export``,
``importer``, ``commits``, ``paths``, ``watch_replay``.
"""
