"""Kubelet device-plugin API v1beta1: the project's own .proto, its generated bindings, constants.

Import the bindings as ``from hami_kube.deviceplugin_api.v1beta1 import api_pb2, api_pb2_grpc``.
Regenerate them with ``python -m hami_kube.deviceplugin_api.generate``.
"""
