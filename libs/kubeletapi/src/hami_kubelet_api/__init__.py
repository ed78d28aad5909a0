"""Kubelet gRPC APIs: the project's own .proto files, their generated bindings, constants.

Device plugin v1beta1 (``from hami_kubelet_api.v1beta1 import api_pb2, api_pb2_grpc``),
pod resources v1 (``podresources.v1``), plugin registration v1 (``pluginregistration.v1``) and
DRA v1 / v1beta1 (``dra.v1``, ``dra.v1beta1``).
Regenerate them with ``python -m hami_kubelet_api.generate``.
"""
