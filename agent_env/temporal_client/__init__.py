"""What every room uses to talk to Temporal, never a worker: the embedded dev server (`server`), the client
connection (`client`) with the search attributes that make runs findable (`attributes`), the install's plan key
and seals (`seals`) and the client-side interceptor that seals every start and update (`sealing`). Workers and
runs live in `agent_env/temporal/`."""
