"""`python -m bench`: the linear-solver suite (bench/run.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from run import main  # pylint: disable=g-import-not-at-top,wrong-import-position

sys.exit(main())
