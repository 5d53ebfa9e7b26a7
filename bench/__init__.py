"""Benchmarks against scipy, MKL, torch.sparse and GraphBLAS."""
