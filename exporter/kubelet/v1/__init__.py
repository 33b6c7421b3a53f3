"""The kubelet's podresources/v1 protocol: `api.proto` and the stubs generated from it.

Do not edit the `api_pb2*` files: run `make proto`.
"""
