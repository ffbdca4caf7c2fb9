"""The explorer: a web page over a local install's runs (`agent-env up`).

It reads what the CLI reads (run records and objects in the stores, live state from Temporal, live
trajectories from the gateway) and serves it as a small JSON API and a page of plain HTML, CSS and
JavaScript modules shipped in the package: nothing to build, nothing fetched from elsewhere.
"""
