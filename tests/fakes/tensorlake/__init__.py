"""A fake of the part of the Tensorlake SDK (tensorlake 0.5) that agent-env's tensorlake provider uses: see `sandbox`."""
