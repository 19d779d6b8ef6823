"""The headless studio: Session (session.py), the `dcstudio` CLI (cli.py), history and report I/O; Qt lives only in studio/gui/.

session_marker.py: the "model is open" marker beside the autosave (crash detection for the GUI's restore offer).
"""
