"""The thresholds file's parts, one module per concern.

values.py holds the value types and their parsers (a matcher's value read as PromQL reads it:
promql_string.py; its regex checked as Prometheus' Go regexp would: go_regexp.py); alert.py
what every alert's entry has; selectors.py what every query selects by; dashboards.py and
deployment.py what grafana/ and `generate`'s manifests read; view.py what the alert specs may
read of the whole. The file as a whole — `Config`, `load_config`, `parse_config` — is
rules/config.py, assembled with the alert specs of rules/alerts/.
"""
