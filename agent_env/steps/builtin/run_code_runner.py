"""Run in a sandbox by `run_code` (standard library only: the sandbox's Python may have nothing else).

    python3 run_code_runner.py RUN_DIR ENTRYPOINT SCRIPT_FILE

Imports RUN_DIR/SCRIPT_FILE (its own folder and RUN_DIR on sys.path, so it imports its siblings), calls
ENTRYPOINT with the JSON of RUN_DIR/input.json (run when it is a coroutine), and writes what it returns as
JSON to RUN_DIR/output.json. An error leaves no output and exits non-zero with its traceback on stderr.
"""

import asyncio
import importlib.util
import inspect
import json
import os
import sys

run_dir, entrypoint, script_file = sys.argv[1], sys.argv[2], sys.argv[3]
script_path = os.path.join(run_dir, script_file)
sys.path[:0] = list(dict.fromkeys([os.path.dirname(script_path), run_dir]))
spec = importlib.util.spec_from_file_location("agent_env_user_script", script_path)
if spec is None or spec.loader is None:
    sys.exit(f"cannot load {script_file}")
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
function = getattr(module, entrypoint, None)
if not callable(function):
    sys.exit(f"{script_file} has no function {entrypoint!r}")
with open(os.path.join(run_dir, "input.json")) as f:
    given = json.load(f)
result = function(given)
if inspect.iscoroutine(result):
    result = asyncio.run(result)
with open(os.path.join(run_dir, "output.json"), "w") as f:
    json.dump(result, f)
