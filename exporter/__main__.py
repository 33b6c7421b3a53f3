"""`python -m kube_gpu_exporter.exporter` runs the CLI."""

import sys

from kube_gpu_exporter.exporter.cli import main

sys.exit(main())
