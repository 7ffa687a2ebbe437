"""voxpool API v1: tts.proto, its generated stubs (tts_pb2, tts_pb2_grpc; regenerate with `python -m protos.generate`)
and wire.py, the values its audio, pacing and speaking-rate fields accept."""
