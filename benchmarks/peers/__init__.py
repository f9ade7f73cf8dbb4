"""Peer-framework runners (e.g. Flower) used by the throughput benchmark."""
