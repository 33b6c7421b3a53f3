"""`kube-gpu-exporter explain`: command.py (flags, run), api.py (one read of the cluster),
manifest.py (`-f`), report.py (what the terminal shows)."""
