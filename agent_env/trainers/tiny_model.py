"""A tiny causal language model made here, with no download: for tests and CPU benchmarks of the adapters.

    path = make_tiny_model("/tmp/tiny")     # a folder `from_pretrained` loads (model and tokenizer)

A Qwen2-shaped model (2 layers, hidden size 64) with seeded random weights, and a byte-level BPE tokenizer
trained on a small built-in corpus of chat and tool-calling text, with Qwen2.5's chat template (TRL's copy, one
TRL recognises: it parses the model's `<tool_call>` blocks into tool calls). Any text encodes (byte-level); the
corpus only decides which strings are single tokens. Two calls with one seed make the same model.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, set_seed
from trl.chat_template_utils import qwen2_5_chat_template

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
]
VOCAB_SIZE = 1024


def _corpus() -> list[str]:
    """What the tokenizer learns its merges from: chat turns, tool schemas and tool calls as the template
    renders them, and plain words."""
    words = (
        "the a an to of and in on for with is are was be it this that you your I we please done "
        "ticket order refund charge status customer agent tool call result error answer task file "
        "name arguments description parameters type string integer number boolean object array required "
        "get set add list read write check verify issue solved open closed comment amount reason id "
        "system user assistant function functions tools help handle"
    ).split()
    lines = [" ".join(words[i : i + 9]) for i in range(0, len(words), 3)]
    lines += [w.capitalize() + "." for w in words]
    for n, word in enumerate(words):
        arguments = {"id": f"{word.upper()}-{1000 + n}", "amount": n * 7, "flag": n % 2 == 0}
        call = {"name": f"{word}_{words[(n + 1) % len(words)]}", "arguments": arguments}
        lines.append(f"<tool_call>\n{json.dumps(call)}\n</tool_call>")
        lines.append(f"<tool_response>\n{json.dumps({'result': word, 'ok': True})}\n</tool_response>")
        schema = {"type": "function", "function": {"name": word, "description": f"The {word}.", "parameters": {}}}
        lines.append(json.dumps(schema))
    lines += [
        f"<|im_start|>{role}\n{line}<|im_end|>" for role in ("system", "user", "assistant") for line in lines[:40]
    ]
    return lines


def _tokenizer() -> PreTrainedTokenizerFast:
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        padding_side="left",
        additional_special_tokens=SPECIAL_TOKENS[1:2] + SPECIAL_TOKENS[3:],
    )
    tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer


def make_tiny_model(path: str | Path, seed: int = 0) -> Path:
    """Write a tiny causal LM and its tokenizer to the folder `path` (made if need be); returns it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    set_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
