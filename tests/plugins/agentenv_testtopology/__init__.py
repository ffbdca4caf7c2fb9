"""A plugin package of agent-env's tests: an env type (`meter`) and a topology (`spare_host`)."""
