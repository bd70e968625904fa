"""`python -m experiments.cli ...` is `draftsim ...`."""
import sys

from experiments.cli import main

sys.exit(main())
