"""Pure domain core of remotelog: KIP-405 model, states, errors, config, backoff.

Nothing in this package imports grpc; services adapt it to gRPC at their edges.
"""
