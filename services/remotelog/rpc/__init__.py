"""The gRPC edge shared by every service: error mapping, server assembly."""
