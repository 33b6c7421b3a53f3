"""Thresholds → Prometheus alerting and recording rules."""
