"""Numba kernels: plain NumPy arrays and scalars in, plain arrays out."""
