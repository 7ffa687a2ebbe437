"""voxpool API v1: tts.proto and its generated stubs (tts_pb2, tts_pb2_grpc); regenerate with `python -m protos.generate`."""
