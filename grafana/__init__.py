"""Grafana dashboards built from the metric catalog."""
