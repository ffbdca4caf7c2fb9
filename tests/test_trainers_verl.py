"""The verl adapter (agent_env.trainers.verl): verl's agent loop over episodes, driven as verl drives it.

The loop is built with verl's own arguments (its config, a real tokenizer made here, its continuous-token
builder and tool parser) and generates through verl's own `LLMServerClient.generate`, whose one replaced piece
is the server it reaches (the part that needs a GPU): a stand-in that returns scripted token ids. Skipped, naming
verl, when verl is not installed, unless AGENT_ENV_REQUIRE_TRAINERS=1 (then it fails).
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

if not os.environ.get("AGENT_ENV_REQUIRE_TRAINERS"):
    pytest.importorskip("verl", reason="verl is not installed (pip install 'agentenv-framework[verl]')")

import numpy as np
import torch
import verl.trainer.config
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from test_episodes import REFUND_SCRIPT
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, DictConfigWrap, _agent_loop_registry
from verl.protocol import DataProto
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.replica import TokenOutput

from agent_env.episodes import Episodes, EpisodeSpec
from agent_env.spec.run import RunStatus
from agent_env.temporal import launch
from agent_env.trainers.verl import AGENT_NAME, EpisodeAgentLoop

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
# Qwen2.5's shape of chat template (tools in the system turn, <tool_call> blocks, tool results as user turns).
CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n{% if messages[0].role == 'system' %}{{ messages[0].content }}\n{% endif %}"
    "# Tools\n<tools>\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools><|im_end|>\n"
    "{%- elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' or (m.role == 'system' and not loop.first) %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{%- elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>\n"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}\n</tool_call>'
    "{%- endfor %}<|im_end|>\n"
    "{%- elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer():
    """A byte-level BPE tokenizer trained here (no download), with a Qwen-shaped chat template."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = [json.dumps({"name": n, "arguments": a}) for n, a in REFUND_SCRIPT] + ["Please handle ticket TCK-1004."]
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer)
    made = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", additional_special_tokens=SPECIALS[3:]
    )
    made.chat_template = CHAT_TEMPLATE
    return made


def verl_config(**multi_turn):
    """The part of verl's trainer config an agent loop reads (its names and defaults as verl's rollout config)."""
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "name": "vllm",
                    "prompt_length": 2048,
                    "response_length": 2048,
                    "full_determinism": False,
                    "multi_turn": {
                        "format": "hermes",
                        "max_assistant_turns": None,
                        "max_user_turns": None,
                        **multi_turn,
                    },
                }
            },
            "data": {"apply_chat_template_kwargs": {}},
        }
    )


class ScriptedServer:
    """The inference server's stand-in (the GPU's part): each generate returns the next scripted token ids and
    records the prompt it was given. `generate.remote(...)` as a Ray actor's method is called."""

    def __init__(self, replies: list[list[int]], fail_at: int | None = None) -> None:
        self.replies, self.fail_at = list(replies), fail_at
        self.prompts: list[list[int]] = []
        self.generate = self  # server.generate.remote(...)

    async def remote(self, *, prompt_ids, sampling_params, **_):
        if self.fail_at is not None and len(self.prompts) == self.fail_at:
            raise RuntimeError("the inference server went away")
        self.prompts.append(list(prompt_ids))
        return TokenOutput(token_ids=self.replies.pop(0), log_probs=None, stop_reason="completed")


class ScriptedClient(LLMServerClient):
    """verl's own LLM server client; only the server it routes to is the stand-in (no Ray load balancer)."""

    def __init__(self, config, server: ScriptedServer) -> None:
        super().__init__(config)
        self.server = server

    async def _acquire_server(self, request_id, **extra):
        return "scripted", self.server

    def _release_server(self, server_id, request_id=None):
        pass


class Recording(Episodes):
    """The test's connection: it remembers every episode started, to show none is left open."""

    def __init__(self, client, settings) -> None:
        super().__init__(client, settings)
        self.started = []

    async def start(self, spec, **kwargs):
        episode = await super().start(spec, **kwargs)
        self.started.append(episode)
        return episode


@pytest.fixture
async def episodes(client, settings, worker):
    connection = Recording(client, settings)
    EpisodeAgentLoop.episodes = connection
    yield connection
    EpisodeAgentLoop.episodes = None
    for episode in connection.started:  # no episode left open, however the loop ended
        state = await launch.wait_result(episode.handle)
        assert state.status.finished


def the_loop(config, tokenizer, server):
    """The loop as verl's AgentLoopWorker instantiates it (the same keyword arguments)."""
    return EpisodeAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=ScriptedClient(config, server),
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        hf_model_type="qwen2",
        tools=None,
    )


def reply(tokenizer, text: str) -> list[int]:
    """What the model samples: text ending its turn (<|im_end|>), as token ids."""
    return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]


def calls(tokenizer) -> list[list[int]]:
    return [
        reply(tokenizer, f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>")
        for n, a in REFUND_SCRIPT
    ]


SAMPLE = {"raw_prompt": [{"role": "user", "content": "ticket"}], "extra_info": {"task": "refund", "seed": 7}}
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}


def test_the_loop_is_registered_under_its_name():
    assert _agent_loop_registry[AGENT_NAME] == {"_target_": "agent_env.trainers.verl.EpisodeAgentLoop"}


async def test_a_solved_episode_is_token_exact_and_rewarded_with_the_run_score(episodes, tokenizer):
    sampled = [*calls(tokenizer), reply(tokenizer, "Refunded CH-5002 and solved TCK-1004.")]
    server = ScriptedServer(sampled)
    output = await the_loop(verl_config(), tokenizer, server).run(SAMPLING, **SAMPLE)

    (episode,) = episodes.started
    outcome = await episode.outcome()
    info = output.extra_fields["agentenv"]
    assert outcome.total == 1.0 and output.reward_score == outcome.total, "the reward is the run's score"
    assert info["run_id"] == episode.run_id and info["status"] == "passed" and info["scores"] == {"grade": 1.0}
    assert info["components"] and all(c["step"] == "grade" for c in info["components"])
    assert info["tool_calls"] == 6 and output.num_turns == 1 + 7 + 6, "the prompt, 7 answers, 6 tool results"
    assert episode.state.steps["work"].outputs["tool_calls"] == 6, "every call reached the role's tools"

    # The first prompt is the episode's turn, rendered with its tools; every later prompt is the last one
    # extended: nothing already in the stream was re-tokenised.
    assert output.prompt_ids == server.prompts[0]
    first = tokenizer.decode(server.prompts[0])
    assert "Please handle ticket TCK-1004." in first and '"name": "issue_refund"' in first
    full = output.prompt_ids + output.response_ids
    for prompt, next_prompt in zip(server.prompts, server.prompts[1:], strict=False):
        assert next_prompt[: len(prompt)] == prompt
    assert full[: len(server.prompts[-1])] == server.prompts[-1]

    # The sampled tokens are in the response exactly as the server returned them, masked 1; all else is 0.
    response, mask = output.response_ids, output.response_mask
    assert len(mask) == len(response)
    at = 0
    for prompt, tokens in zip(server.prompts, sampled, strict=True):
        start = len(prompt) - len(output.prompt_ids)
        assert response[start : start + len(tokens)] == tokens
        assert mask[start : start + len(tokens)] == [1] * len(tokens)
        assert set(mask[at:start]) <= {0}, "tool results (env tokens) are masked 0"
        at = start + len(tokens)
    assert at == len(response) and sum(mask) == sum(len(t) for t in sampled)
    assert "<tool_response>" in tokenizer.decode([t for t, m in zip(response, mask, strict=True) if not m])


async def test_a_model_that_does_nothing_scores_what_the_task_says(episodes, tokenizer):
    server = ScriptedServer([reply(tokenizer, "I looked but did nothing.")])
    output = await the_loop(verl_config(), tokenizer, server).run(SAMPLING, **SAMPLE)
    assert output.reward_score == 0.0 and output.extra_fields["agentenv"]["status"] == "failed"
    assert output.response_mask == [1] * len(output.response_ids)


async def test_stopping_at_max_turns_abandons_the_episode(episodes, tokenizer):
    server = ScriptedServer(calls(tokenizer))
    loop = the_loop(verl_config(max_assistant_turns=2), tokenizer, server)
    output = await loop.run(SAMPLING, **SAMPLE)
    (episode,) = episodes.started
    state = await launch.wait_result(episode.handle)
    assert len(server.prompts) == 2 and state.status is RunStatus.CANCELLED and "max_assistant_turns" in state.error
    info = output.extra_fields["agentenv"]
    assert output.reward_score == 0.0 and info["truncated"] and info["status"] == "cancelled"
    assert episode.state.steps["work"].outputs.get("tool_calls", 2) <= 2


@pytest.mark.parametrize("stop", ["error", "cancel"])
async def test_a_failing_or_cancelled_loop_abandons_the_episode(episodes, tokenizer, stop):
    if stop == "error":
        server = ScriptedServer(calls(tokenizer), fail_at=1)
        with pytest.raises(RuntimeError, match="went away"):
            await the_loop(verl_config(), tokenizer, server).run(SAMPLING, **SAMPLE)
        reason = "RuntimeError"
    else:
        server = ScriptedServer(calls(tokenizer))
        run = asyncio.create_task(the_loop(verl_config(), tokenizer, server).run(SAMPLING, **SAMPLE))
        while len(server.prompts) < 2:
            await asyncio.sleep(0.01)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        reason = "CancelledError"
    (episode,) = episodes.started
    state = await launch.wait_result(episode.handle)
    assert state.status is RunStatus.CANCELLED and reason in state.error


async def test_a_sample_without_a_task_is_refused_before_any_episode(episodes, tokenizer):
    with pytest.raises(ValueError, match="names its task"):
        await the_loop(verl_config(), tokenizer, ScriptedServer([])).run(SAMPLING, raw_prompt=[], extra_info={})
    assert episodes.started == []


def test_an_episode_spec_takes_the_sample_fields():
    from agent_env.trainers.verl import episode_spec

    spec = episode_spec({"task": "refund", "agents": ["refunds"], "seed": 3, "turn_timeout": 30})
    assert isinstance(spec, EpisodeSpec) and spec.seed == 3 and spec.trainer_agents == ["refunds"]


def trainer_config(model_path) -> OmegaConf:
    """verl's own PPO trainer config (its defaults, as `python -m verl.trainer.main_ppo` composes them), with
    the loop chosen and a model folder made here."""
    with initialize_config_dir(config_dir=os.path.dirname(verl.trainer.config.__file__), version_base=None):
        return compose(
            config_name="ppo_trainer",
            overrides=[
                f"actor_rollout_ref.model.path={model_path}",
                "actor_rollout_ref.rollout.name=vllm",
                "actor_rollout_ref.rollout.prompt_length=2048",
                "actor_rollout_ref.rollout.response_length=4096",
                "actor_rollout_ref.rollout.multi_turn.format=hermes",
                f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME}",
            ],
        )


async def test_verls_agent_loop_worker_runs_the_loop_and_batches_its_reward(episodes, tokenizer, tmp_path):
    """verl's AgentLoopWorker (what its PPO/GRPO trainer runs each rollout step through) instantiates the loop
    from its registry, runs a sample and pads the batch: the reward lands on the last response token."""
    tokenizer.save_pretrained(tmp_path)
    Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        architectures=["Qwen2ForCausalLM"],
    ).save_pretrained(tmp_path)
    config = trainer_config(tmp_path)
    sampled = [*calls(tokenizer), reply(tokenizer, "Refunded CH-5002 and solved TCK-1004.")]
    server = ScriptedServer(sampled)
    worker = AgentLoopWorker(config, ScriptedClient(config, server))
    batch = DataProto.from_dict(
        non_tensors={
            "raw_prompt": np.array([SAMPLE["raw_prompt"]], dtype=object),
            "extra_info": np.array([SAMPLE["extra_info"]], dtype=object),
        }
    )
    out = await worker.generate_sequences(batch)

    (episode,) = episodes.started
    assert out.non_tensor_batch["agentenv"][0]["run_id"] == episode.run_id
    mask, responses = out.batch["response_mask"][0], out.batch["responses"][0]
    assert responses[mask.bool()].tolist() == [t for tokens in sampled for t in tokens], "sampled tokens, exactly"
    last = int(out.batch["attention_mask"][0, 2048:].sum()) - 1
    rewards = out.batch["rm_scores"][0]
    assert rewards[last].item() == 1.0 and rewards.sum().item() == 1.0, "the run's score, on the last token"
    prompt = out.batch["prompts"][0]
    assert prompt[prompt != tokenizer.pad_token_id].tolist() == server.prompts[0]
    assert torch.equal(out.batch["input_ids"][0], torch.cat([prompt, responses]))
