"""`python -m kube_gpu_exporter.exporter` runs the CLI."""

import sys

from .cli import main

sys.exit(main())
