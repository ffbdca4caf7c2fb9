"""Where things live in the stores: the layout, named once, so what writes a key and what reads it agree.

Objects:

    artifacts/sha256-HEX.EXT                     content-addressed inputs (data files, build contexts)
    plans/sha256-HEX.json                        a run's plan, by its digest (`runs rerun` starts it again)
    runs/RUN/snapshots/NAME.tar                  snapshot_env; restore_env reads it back
    runs/RUN/snapshots/NAME.changes.jsonl        snapshot_env's include_env_changes: the changelog (changes/v1)
    runs/RUN/snapshots/NAME.trajectory.jsonl     snapshot_env's include_env_trajectory: every call made in the env
    runs/RUN/placements/INSTANCE.json            where a gateway pool placed an instance, and how to rebuild it
    runs/RUN/trajectories/INSTANCE.jsonl         an instance's trajectory, kept when it is retired
    runs/RUN/transcripts/STEP.json               a prompt's transcript
    runs/RUN/transcripts/STEP/SIDE-TURN.txt      a message too long for the run's history, kept apart
    runs/RUN/artifacts/...                       collect_artifacts (ENV/trajectory.jsonl, ENV/data.json,
                                                 manifest.json)
    registry/blobs/sha256-HEX                    a registry file's bytes, stored once per content
    compatibility/ENV/UNIVERSE@VERSION.json      whether an env takes a universe back unchanged: the latest
                                                 round trip's verdict (persist_result), or the combined one

Documents: run records in the `RUNS` collection, by run id; registry versions in `REGISTRY`, by
`registry_version(kind, name, label)`; eval runs in `EVAL_RUNS`, by eval run id.
"""

from __future__ import annotations

import hashlib

RUNS = "runs"  # the document collection of run records
REGISTRY = "registry"  # the document collection of registry versions (envs, tasks, agents, artifacts, evals)
EVAL_RUNS = "eval_runs"  # the document collection of eval runs (`spec.evals.EvalRun`), by eval run id

_CONTENT = "artifacts/sha256-"


def content(data: bytes, extension: str) -> str:
    """The key of these bytes: the same bytes always get the same key (so they are stored once)."""
    return f"{_CONTENT}{hashlib.sha256(data).hexdigest()}.{extension}"


def is_content(value: str) -> bool:
    return value.startswith(_CONTENT)


def plan(digest: str) -> str:
    """A run's plan by its digest (`sha256:HEX`)."""
    return f"plans/sha256-{digest.removeprefix('sha256:')}.json"


def content_digest(key: str) -> str:
    """The hash a `content` key names (e.g. to unpack a build context once per content)."""
    return key.rsplit("sha256-", 1)[1].rsplit(".", 1)[0]


def run(run_id: str) -> str:
    """The prefix of everything a run keeps."""
    return f"runs/{run_id}/"


def snapshot(run_id: str, name: str) -> str:
    return f"{run(run_id)}snapshots/{name}.tar"


def snapshot_changes(run_id: str, name: str) -> str:
    return f"{run(run_id)}snapshots/{name}.changes.jsonl"


def snapshot_trajectory(run_id: str, name: str) -> str:
    return f"{run(run_id)}snapshots/{name}.trajectory.jsonl"


def placement(run_id: str, instance: str) -> str:
    return f"{run(run_id)}placements/{instance}.json"


def placements(run_id: str) -> str:
    return f"{run(run_id)}placements/"


def env_server(run_id: str, instance: str) -> str:
    """Where an instance deployed on a server of its own (a topology other than `gateway`) is served."""
    return f"{run(run_id)}env-servers/{instance}.json"


def env_servers(run_id: str) -> str:
    return f"{run(run_id)}env-servers/"


def trajectory(run_id: str, instance: str) -> str:
    return f"{run(run_id)}trajectories/{instance}.jsonl"


def transcripts(run_id: str) -> str:
    """The prefix of a run's transcripts (and the messages kept apart from them)."""
    return f"{run(run_id)}transcripts/"


def transcript(run_id: str, step: str) -> str:
    return f"{transcripts(run_id)}{step}.json"


def message(run_id: str, step: str, side: str, turn: int) -> str:
    return f"{transcripts(run_id)}{step}/{side}-{turn}.txt"


def artifact(run_id: str, *parts: str) -> str:
    """A file collect_artifacts keeps: `artifact(run, env, "data.json")`, `artifact(run, "manifest.json")`."""
    return "/".join((f"{run(run_id)}artifacts", *parts))


def compatibility(env: str, universe: str) -> str:
    """An env's verdict on a universe (`NAME@VERSION`), kept across runs."""
    return f"compatibility/{env}/{universe}.json"


def registry_blob(sha256_hex: str) -> str:
    """A registry file's bytes, by their sha256: the same bytes are stored once, whoever pushes them."""
    return f"registry/blobs/sha256-{sha256_hex}"


def registry_item(kind: str, name: str) -> str:
    """The key prefix of an item's versions (`envs/support-desk@`): names cannot hold '@'."""
    return f"{kind}/{name}@"


def registry_version(kind: str, name: str, label: str) -> str:
    return f"{registry_item(kind, name)}{label}"
