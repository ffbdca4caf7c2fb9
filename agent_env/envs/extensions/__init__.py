"""The open protocol's extensions an env server of ours declares on its card (`capabilities.extensions`) and
serves, one module each:

- `data_objects`: `urn:agentenv:data-objects/v1`: data/get uploads the export under a `write_namespace` grant;
  data/add reads file parts that name an object (a read grant, or an https URL). `transfer` moves the bytes.
- `interfaces`: `urn:agentenv:get-interfaces/v1`: the interface manifests (a CLI's) built from the app's tools.
- `intake`: `urn:agentenv:intake/v1`: what data/add takes and data/get answers, per table (declaration only).
- `set_errors`: `urn:agentenv:set-errors/v1`: make a tool fail on purpose, at a rate, with an error type.
"""
