"""Generated bindings of kubelet's ``v1beta1`` device-plugin API: ``api_pb2``, ``api_pb2_grpc``."""
