"""Pythonic operations, one module per cuDNN operation family."""
