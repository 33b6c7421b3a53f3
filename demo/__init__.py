"""`kube-gpu-exporter demo`: a simulated GPU node, its kubelet, Prometheus and Alertmanager.

Everything `make demo` shows runs from here, so a newcomer sees the exporter, the generated
rules and the alerts work together on a machine without a GPU or a cluster.
"""
