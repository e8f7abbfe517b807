"""Runs kept in SQLite: every simulation, live run, replay, analysis and calibration, to list, compare, export and share."""
