"""The studio: ``session`` (the headless Session, its recipes, reports and exports), ``cli`` (the `dcstudio`
command, one module per command), ``tune`` (the pass-sequence search) and ``text`` (figures and arguments both
share); Qt lives only in ``studio/gui/``."""
