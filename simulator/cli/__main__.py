"""``python -m simulator.cli``: the same entry point as the ``specsim`` command."""
import sys

from simulator.cli.main import main

sys.exit(main())
