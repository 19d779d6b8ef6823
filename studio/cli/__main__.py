"""``python -m studio.cli``: the ``dcstudio`` command."""
import sys

from studio.cli.dispatch import main

sys.exit(main())
