"""What both ends of a call share: proto <-> domain conversion, the bulk messages'
encoding, trace propagation. Used by the services' gRPC edge and by the clients."""
