"""The kubelet pod-resources API client: which container holds which device.

`client.py` talks to the kubelet; `v1/` holds our own copy of the kubelet's .proto and the
stubs generated from it (`make proto`).
"""
