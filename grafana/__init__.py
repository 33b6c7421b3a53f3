"""Grafana dashboards built from the metric catalog (issue 4)."""
