"""Generated bindings of the kubelet's ``v1`` pod-resources API: ``api_pb2``, ``api_pb2_grpc``."""
