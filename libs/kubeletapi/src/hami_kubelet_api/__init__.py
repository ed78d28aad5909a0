"""Kubelet device-plugin API v1beta1: the project's own .proto, its generated bindings, constants.

Import the bindings as ``from hami_kubelet_api.v1beta1 import api_pb2, api_pb2_grpc``.
Regenerate them with ``python -m hami_kubelet_api.generate``.
"""
