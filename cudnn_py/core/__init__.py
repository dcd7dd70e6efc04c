"""The core objects: handles, device memory, streams, descriptors, workspaces, dtypes and the argument checks."""
