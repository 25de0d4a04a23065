"""Cluster simulator: replays real GPU-cluster traces through corral's scheduling engine."""
