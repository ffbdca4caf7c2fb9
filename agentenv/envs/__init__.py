"""Environments: the apps agents act in, and (with the environment SDK) the way to build them."""
