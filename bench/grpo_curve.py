"""Learning, shown: GRPO with TRL on an agentenv task, through the TRL adapter (agent_env.trainers.trl), where
the reward is the task's own score.

    .venv/bin/pip install torch==2.13.0 && .venv/bin/pip install -e '.[trl]' matplotlib
    .venv/bin/python bench/grpo_curve.py                      # a tiny model made here, on this machine's CPU
    .venv/bin/python bench/grpo_curve.py --model Qwen/Qwen2.5-0.5B-Instruct   # a real one (a GPU if there is one)

The task (bench/bundles/say-o): say the letter o as many times as you can, graded by its check_response step
with partial credit (an eighth per o, up to eight). Each GRPO step plays `--group` episodes of it, one per
rollout: the adapter's `reset` starts the episode and returns its prompt, TRL generates, the adapter's `answers`
reward function gives the rollout's final message as the agent's answer, and `get_reward()` ends the turn and
returns the run's score, the only reward the trainer gets.

Without `--model` the model is made here by agent_env.trainers.tiny_model (random weights, a tokenizer trained
here: no download); from random tokens it has to learn, from the task's scores alone, to write tokens full of o.
With `--model` the same script trains a real model (on a GPU when there is one).

Figures: the mean reward of the first 20 steps and of the last 20, wall time, the machine's load; the curve
(each step's mean reward and its 10-step moving mean) goes to a PNG (`--plot`). Then the time of one episode
through the adapter against the bare episode API (the same answer, rounds alternated, medians).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from common import AGENT_ENV, isolated_env, row, temp_dir  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from agent_env.episodes import Episodes, EpisodeSpec  # noqa: E402
from agent_env.planning.tasks import load_task  # noqa: E402
from agent_env.trainers.tiny_model import make_tiny_model  # noqa: E402
from agent_env.trainers.trl import answers, environment_factory  # noqa: E402

TASK = Path(__file__).parent / "bundles" / "say-o" / "tasks" / "say-o.toml"
GOOD = "oooooooo"  # an answer that scores 1
WINDOW = 20  # steps averaged at each end of the curve
OVERHEAD_ROUNDS = 20


class Curve(TrainerCallback):
    """Each step's mean reward, as the trainer logs it."""

    def __init__(self) -> None:
        self.rewards: list[float] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            self.rewards.append(float(logs["reward"]))


def plot(rewards: list[float], path: Path, title: str) -> None:
    steps = list(range(1, len(rewards) + 1))
    moving = [statistics.fmean(rewards[max(0, i - 9) : i + 1]) for i in range(len(rewards))]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(steps, rewards, ".", alpha=0.45, label="mean reward of the step's group")
    ax.plot(steps, moving, "-", linewidth=2, label="10-step moving mean")
    n = min(WINDOW, len(rewards))
    for lo, hi in ((0, n), (len(rewards) - n, len(rewards))):
        mean = statistics.fmean(rewards[lo:hi])
        ax.hlines(mean, lo + 1, hi, colors="k", linestyles="dashed")
        ax.annotate(f"{mean:.2f}", (hi, mean), textcoords="offset points", xytext=(-28, 6))
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("task score (reward)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def train(args, spec: EpisodeSpec) -> tuple[list[float], float, str]:
    """GRPO over episodes of the task: (each step's mean reward, seconds, model name)."""
    if args.model:
        name = args.model
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype="auto")
        tokenizer = AutoTokenizer.from_pretrained(args.model)
    else:
        path = temp_dir("agentenv-tiny-model-")
        make_tiny_model(path, seed=args.seed)
        model = AutoModelForCausalLM.from_pretrained(path)
        tokenizer = AutoTokenizer.from_pretrained(path)
        name = f"tiny model (random weights, seed {args.seed})"
        if not torch.cuda.is_available():
            torch.set_num_threads(1)  # a model this small gains nothing from threads, which spin against the load
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    gpu = torch.cuda.is_available()
    config = GRPOConfig(
        output_dir=str(temp_dir("agentenv-grpo-")),
        max_steps=args.steps,
        per_device_train_batch_size=args.group,
        num_generations=args.group,
        max_completion_length=args.max_completion_length,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        beta=0.0,
        temperature=1.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=args.seed,
        bf16=gpu and torch.cuda.is_bf16_supported(),
        disable_tqdm=True,
    )
    curve = Curve()
    trainer = GRPOTrainer(
        model=model,
        args=config,
        processing_class=tokenizer,
        reward_funcs=[answers],  # (scores nothing: hands each rollout's final message to its episode)
        environment_factory=environment_factory(spec, seed=args.seed),
        callbacks=[curve],
    )
    began = time.perf_counter()
    trainer.train()
    return curve.rewards, time.perf_counter() - began, name


def overhead(spec: EpisodeSpec) -> tuple[float, float]:
    """Median seconds per episode (start, answer, score): through the adapter, and the bare API."""
    env = environment_factory(spec)()

    def adapter() -> float:
        began = time.perf_counter()
        env.reset()
        answers([GOOD], [env])
        assert env.get_reward() == 1.0
        return time.perf_counter() - began

    loop = asyncio.new_event_loop()  # the bare API's connection, kept across rounds as the adapter keeps its own
    episodes = loop.run_until_complete(Episodes.connect())

    async def bare_one() -> float:
        began = time.perf_counter()
        episode = await spec.start(episodes)
        turn = await episode.next_turn()
        await turn.end(GOOD)
        scores = await episode.result()
        assert scores == {"grade": 1.0}, scores
        return time.perf_counter() - began

    ours, bare = [], []
    try:
        adapter(), loop.run_until_complete(bare_one())  # warm both up
        for _ in range(OVERHEAD_ROUNDS):
            ours.append(adapter())
            bare.append(loop.run_until_complete(bare_one()))
    finally:
        loop.run_until_complete(episodes.close())
        loop.close()
    return statistics.median(ours), statistics.median(bare)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a model name or path (default: a tiny random model made here)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--group", type=int, default=8, help="rollouts (episodes) per GRPO step")
    parser.add_argument("--lr", type=float, default=None, help="default: 5e-3 for the tiny model, 1e-6 for --model")
    parser.add_argument("--max-completion-length", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=Path(tempfile.gettempdir()) / "agentenv-grpo-curve.png")
    parser.add_argument("--no-overhead", action="store_true", help="skip the per-episode overhead figures")
    args = parser.parse_args()
    if args.lr is None:
        args.lr = 1e-6 if args.model else 5e-3
    if args.max_completion_length is None:
        args.max_completion_length = 256 if args.model else 16

    env = isolated_env()
    saved = dict(os.environ)
    os.environ.update(env)
    subprocess.run([AGENT_ENV, "server", "start"], env=env, capture_output=True, check=True, timeout=120)
    try:
        spec = EpisodeSpec.from_task(load_task(TASK), turn_timeout=120)
        rewards, seconds, name = train(args, spec)
        n = min(WINDOW, len(rewards))
        first, last = statistics.fmean(rewards[:n]), statistics.fmean(rewards[-n:])
        load = os.getloadavg()
        print(f"GRPO (TRL) on {spec.task.id}: {name}, {len(rewards)} steps x {args.group} episodes")
        row(f"mean reward, first {n} steps", f"{first:.3f}")
        row(f"mean reward, last {n} steps", f"{last:.3f}", f"{last - first:+.3f}")
        row("training wall time", f"{seconds:.0f} s", f"{seconds / len(rewards):.2f} s per step")
        row("load average (1, 5, 15 min)", " ".join(f"{x:.2f}" for x in load), f"{os.cpu_count()} cores")
        plot(rewards, args.plot, f"GRPO on agentenv task {spec.task.id}: {name}")
        row("curve", str(args.plot.resolve()))
        if not args.no_overhead:
            ours, bare = overhead(spec)
            row("episode through the TRL adapter (p50)", f"{ours * 1000:.0f} ms", f"{ours / bare:.2f}x the bare API")
            row("episode through the bare episode API (p50)", f"{bare * 1000:.0f} ms")
    finally:
        for what in ("gateway", "server"):
            subprocess.run([AGENT_ENV, what, "stop"], env=env, capture_output=True, timeout=60)
        os.environ.clear()
        os.environ.update(saved)


if __name__ == "__main__":
    sys.exit(main())
