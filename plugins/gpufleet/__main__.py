"""``python -m gpufleet`` (the same as the ``gpufleet`` console script).

plugins/.airflowignore keeps Airflow's plugin loader from importing the files of this package
as top-level modules; were it removed, this file would run inside every Airflow process.
"""

import sys

from gpufleet.cli import main

sys.exit(main())
