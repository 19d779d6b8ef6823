"""The headless studio: Session (session.py), the `dcstudio` CLI (cli.py), history and report I/O; Qt lives only in studio/gui/."""
