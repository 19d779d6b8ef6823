"""The ``dcstudio`` command line: ``dispatch`` builds the parser and runs ``main``; one module per command."""
from studio.cli.dispatch import main  # noqa: F401
