"""Thresholds → Prometheus alerting and recording rules (issue 4)."""
